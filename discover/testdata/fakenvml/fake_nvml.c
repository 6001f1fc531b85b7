/* A stand-in for libnvidia-ml.so.1, compiled by nvml_linux_test.go with the
 * system C compiler, to check that the purego binding passes arguments and
 * reads structs the way the C ABI lays them out. Struct layouts follow the
 * NVML API reference (nvmlPciInfo_t, nvmlMemory_t); values are those of the
 * nvidia-8xh100 fixture's first two GPUs. Build with -DINIT_FAIL=N to make
 * nvmlInit_v2 return N. Test data only: tensorbridge has no C code. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

static int initialised;

int nvmlInit_v2(void) {
#ifdef INIT_FAIL
    return INIT_FAIL;
#else
    initialised = 1;
    return 0;
#endif
}

int nvmlShutdown(void) { initialised = 0; return 0; }

const char *nvmlErrorString(int r) {
    switch (r) {
    case 9: return "Driver Not Loaded";
    case 999: return "Unknown Error";
    }
    return "fake error";
}

int nvmlSystemGetDriverVersion(char *v, unsigned int n) {
    snprintf(v, n, "545.23.08");
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *c) {
    if (!initialised) return 1; /* NVML_ERROR_UNINITIALIZED */
    *c = 2;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) {
    if (i >= 2) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *h = (void *)(uintptr_t)(0x1000 + i);
    return 0;
}

static int idx(void *h) { return (int)((uintptr_t)h - 0x1000); }

int nvmlDeviceGetName(void *h, char *name, unsigned int n) {
    if (idx(h) < 0 || idx(h) > 1) return 2;
    snprintf(name, n, "NVIDIA H100 80GB HBM3");
    return 0;
}

int nvmlDeviceGetUUID(void *h, char *uuid, unsigned int n) {
    snprintf(uuid, n, "GPU-00000000-0000-4000-8000-00000000000%d", idx(h));
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    if (idx(h) == 1) return 999; /* second GPU: a failing query */
    m->total = 85520809984ULL; /* 81559 MiB */
    m->used = 2097152ULL;
    m->free = 85520809984ULL - 2097152ULL;
    return 0;
}

int nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *p) {
    static const unsigned int bus[2] = {0x16, 0x17};
    memset(p, 0, sizeof *p);
    p->domain = 0;
    p->bus = bus[idx(h)];
    p->device = 0;
    p->pciDeviceId = 0x233010DEu;
    p->pciSubSystemId = 0x16C110DEu;
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", bus[idx(h)]);
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", bus[idx(h)]);
    return 0;
}

/* The size the Go side must agree with. */
unsigned int fake_pci_info_size(void) { return sizeof(nvmlPciInfo_t); }
