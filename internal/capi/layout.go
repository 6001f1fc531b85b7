package capi

import (
	"reflect"
	"sync"
	"unsafe"
)

// This file mirrors the argument structs of the PJRT C API header
// (xla/pjrt/c/pjrt_c_api.h, PJRT_API_MAJOR 0, PJRT_API_MINOR 83) field by
// field, for 64-bit Linux (LP64: size_t, pointers and int64_t are 8 bytes,
// int and enums 4, bool 1). Go lays out these field types exactly as a C
// compiler does on amd64 and arm64, so a pointer to one of these structs can be
// handed to the plugin as the C struct.
//
// Conventions:
//   - opaque handles the plugin owns (PJRT_Client*, PJRT_Buffer*, ...) are
//     uintptr: Go never dereferences them;
//   - pointers to data Go reads (strings, arrays the plugin returns) or Go
//     memory the plugin reads (pinned for the call) are unsafe.Pointer;
//   - the first two fields of every struct are struct_size and
//     extension_start; struct_size is set by newArgs to the header's
//     PJRT_STRUCT_SIZE, offsetof(last field) + sizeof(last field), which has no
//     trailing padding (the test compares every value with the header's
//     _STRUCT_SIZE constants as computed by a C compiler).
//
// Every struct here is the newest layout the binding knows. A plugin built
// from an older header reads only the prefix its struct_size covers; a field
// this binding sets that the plugin does not know is ignored by it.

type cErrorDestroyArgs struct {
	structSize uintptr
	ext        uintptr
	err        uintptr
}

type cErrorMessageArgs struct {
	structSize  uintptr
	ext         uintptr
	err         uintptr
	message     unsafe.Pointer
	messageSize uintptr
}

type cErrorGetCodeArgs struct {
	structSize uintptr
	ext        uintptr
	err        uintptr
	code       int32
}

// cNamedValue is PJRT_NamedValue. The C union of string pointer, int64,
// int64 array pointer, float and bool is the 8-byte value field: it is a
// uint64 so that the garbage collector never mistakes an integer for a
// pointer; pointers stored in it always point to pinned or C memory.
type cNamedValue struct {
	structSize uintptr
	ext        uintptr
	name       unsafe.Pointer
	nameSize   uintptr
	typ        int32
	value      uint64
	valueSize  uintptr
}

type cPluginInitializeArgs struct {
	structSize uintptr
	ext        uintptr
}

type cPluginAttributesArgs struct {
	structSize    uintptr
	ext           uintptr
	attributes    unsafe.Pointer
	numAttributes uintptr
}

type cEventArgs struct { // PJRT_Event_Destroy_Args, _Error_Args, _Await_Args
	structSize uintptr
	ext        uintptr
	event      uintptr
}

type cEventIsReadyArgs struct {
	structSize uintptr
	ext        uintptr
	event      uintptr
	isReady    bool
}

type cClientCreateArgs struct {
	structSize       uintptr
	ext              uintptr
	createOptions    unsafe.Pointer
	numOptions       uintptr
	kvGetCallback    uintptr
	kvGetUserArg     uintptr
	kvPutCallback    uintptr
	kvPutUserArg     uintptr
	client           uintptr
	kvTryGetCallback uintptr
	kvTryGetUserArg  uintptr
}

type cClientArgs struct { // PJRT_Client_Destroy_Args
	structSize uintptr
	ext        uintptr
	client     uintptr
}

type cClientStringArgs struct { // PJRT_Client_PlatformName_Args, _PlatformVersion_Args
	structSize uintptr
	ext        uintptr
	client     uintptr
	str        unsafe.Pointer
	strSize    uintptr
}

type cClientProcessIndexArgs struct {
	structSize   uintptr
	ext          uintptr
	client       uintptr
	processIndex int32
}

type cClientDevicesArgs struct { // PJRT_Client_Devices_Args, _AddressableDevices_Args
	structSize uintptr
	ext        uintptr
	client     uintptr
	devices    unsafe.Pointer
	numDevices uintptr
}

type cClientLookupDeviceArgs struct {
	structSize uintptr
	ext        uintptr
	client     uintptr
	id         int32
	device     uintptr
}

type cClientTopologyDescriptionArgs struct {
	structSize uintptr
	ext        uintptr
	client     uintptr
	topology   uintptr
}

type cProgram struct {
	structSize uintptr
	ext        uintptr
	code       unsafe.Pointer
	codeSize   uintptr
	format     unsafe.Pointer
	formatSize uintptr
}

type cClientCompileArgs struct {
	structSize         uintptr
	ext                uintptr
	client             uintptr
	program            unsafe.Pointer
	compileOptions     unsafe.Pointer
	compileOptionsSize uintptr
	executable         uintptr
}

type cClientDefaultDeviceAssignmentArgs struct {
	structSize            uintptr
	ext                   uintptr
	client                uintptr
	numReplicas           int32
	numPartitions         int32
	defaultAssignmentSize uintptr
	defaultAssignment     unsafe.Pointer
}

type cClientBufferFromHostBufferArgs struct {
	structSize          uintptr
	ext                 uintptr
	client              uintptr
	data                unsafe.Pointer
	typ                 int32
	dims                unsafe.Pointer
	numDims             uintptr
	byteStrides         unsafe.Pointer
	numByteStrides      uintptr
	hostBufferSemantics int32
	device              uintptr
	memory              uintptr
	deviceLayout        unsafe.Pointer
	doneWithHostBuffer  uintptr
	buffer              uintptr
}

type cDescIntArgs struct { // PJRT_DeviceDescription_Id_Args, _ProcessIndex_Args
	structSize uintptr
	ext        uintptr
	desc       uintptr
	value      int32
}

type cDescAttributesArgs struct {
	structSize    uintptr
	ext           uintptr
	desc          uintptr
	numAttributes uintptr
	attributes    unsafe.Pointer
}

type cDescStringArgs struct { // PJRT_DeviceDescription_Kind/_DebugString/_ToString_Args
	structSize uintptr
	ext        uintptr
	desc       uintptr
	str        unsafe.Pointer
	strSize    uintptr
}

type cDeviceGetDescriptionArgs struct {
	structSize uintptr
	ext        uintptr
	device     uintptr
	desc       uintptr
}

type cDeviceIsAddressableArgs struct {
	structSize    uintptr
	ext           uintptr
	device        uintptr
	isAddressable bool
}

type cDeviceLocalHardwareIDArgs struct {
	structSize      uintptr
	ext             uintptr
	device          uintptr
	localHardwareID int32
}

type cDeviceAddressableMemoriesArgs struct {
	structSize  uintptr
	ext         uintptr
	device      uintptr
	memories    unsafe.Pointer
	numMemories uintptr
}

type cDeviceDefaultMemoryArgs struct {
	structSize uintptr
	ext        uintptr
	device     uintptr
	memory     uintptr
}

type cDeviceMemoryStatsArgs struct {
	structSize                 uintptr
	ext                        uintptr
	device                     uintptr
	bytesInUse                 int64
	peakBytesInUse             int64
	peakBytesInUseIsSet        bool
	numAllocs                  int64
	numAllocsIsSet             bool
	largestAllocSize           int64
	largestAllocSizeIsSet      bool
	bytesLimit                 int64
	bytesLimitIsSet            bool
	bytesReserved              int64
	bytesReservedIsSet         bool
	peakBytesReserved          int64
	peakBytesReservedIsSet     bool
	bytesReservableLimit       int64
	bytesReservableLimitIsSet  bool
	largestFreeBlockBytes      int64
	largestFreeBlockBytesIsSet bool
	poolBytes                  int64
	poolBytesIsSet             bool
	peakPoolBytes              int64
	peakPoolBytesIsSet         bool
}

type cMemoryIDArgs struct {
	structSize uintptr
	ext        uintptr
	memory     uintptr
	id         int32
}

type cMemoryKindArgs struct {
	structSize uintptr
	ext        uintptr
	memory     uintptr
	kind       unsafe.Pointer
	kindSize   uintptr
}

type cExecutableArgs struct { // PJRT_Executable_Destroy_Args, PJRT_LoadedExecutable_Destroy_Args
	structSize uintptr
	ext        uintptr
	executable uintptr
}

type cLoadedExecutableGetExecutableArgs struct {
	structSize uintptr
	ext        uintptr
	loaded     uintptr
	executable uintptr
}

type cLoadedExecutableAddressableDevicesArgs struct {
	structSize uintptr
	ext        uintptr
	executable uintptr
	devices    unsafe.Pointer
	numDevices uintptr
}

type cExecutableStringArgs struct { // PJRT_Executable_Name_Args, _Fingerprint_Args
	structSize uintptr
	ext        uintptr
	executable uintptr
	str        unsafe.Pointer
	strSize    uintptr
}

type cExecutableCountArgs struct { // PJRT_Executable_NumReplicas/_NumPartitions/_NumOutputs_Args
	structSize uintptr
	ext        uintptr
	executable uintptr
	count      uintptr
}

type cExecutableSizeOfGeneratedCodeArgs struct {
	structSize  uintptr
	ext         uintptr
	executable  uintptr
	sizeInBytes int64
}

type cExecutableGetCostAnalysisArgs struct {
	structSize    uintptr
	ext           uintptr
	executable    uintptr
	numProperties uintptr
	properties    unsafe.Pointer
}

type cExecutableGetCompiledMemoryStatsArgs struct {
	structSize                 uintptr
	ext                        uintptr
	executable                 uintptr
	generatedCodeSizeInBytes   int64
	argumentSizeInBytes        int64
	outputSizeInBytes          int64
	aliasSizeInBytes           int64
	tempSizeInBytes            int64
	hostGeneratedCodeSizeBytes int64
	hostArgumentSizeInBytes    int64
	hostOutputSizeInBytes      int64
	hostAliasSizeInBytes       int64
	hostTempSizeInBytes        int64
	peakMemoryInBytes          int64
}

type cExecutableOutputElementTypesArgs struct {
	structSize     uintptr
	ext            uintptr
	executable     uintptr
	outputTypes    unsafe.Pointer
	numOutputTypes uintptr
}

type cExecutableOutputDimensionsArgs struct {
	structSize uintptr
	ext        uintptr
	executable uintptr
	numOutputs uintptr
	dims       unsafe.Pointer
	dimSizes   unsafe.Pointer
}

type cExecutableOutputMemoryKindsArgs struct {
	structSize      uintptr
	ext             uintptr
	executable      uintptr
	numOutputs      uintptr
	memoryKinds     unsafe.Pointer
	memoryKindSizes unsafe.Pointer
}

// cSerializedArgs is the shape shared by PJRT_Executable_Serialize_Args,
// PJRT_LoadedExecutable_GetDeviceAssignment_Args and
// PJRT_TopologyDescription_Serialize_Args: an input handle, the bytes, an
// opaque owner of the bytes and the function that frees the owner.
type cSerializedArgs struct {
	structSize uintptr
	ext        uintptr
	object     uintptr
	bytes      unsafe.Pointer
	bytesSize  uintptr
	owner      uintptr
	deleter    uintptr
}

type cExecutableDeserializeAndLoadArgs struct {
	structSize             uintptr
	ext                    uintptr
	client                 uintptr
	serialized             unsafe.Pointer
	serializedSize         uintptr
	loaded                 uintptr
	overriddenOptions      unsafe.Pointer
	overriddenOptionsSizes uintptr
}

type cExecuteOptions struct {
	structSize                  uintptr
	ext                         uintptr
	sendCallbacks               unsafe.Pointer
	recvCallbacks               unsafe.Pointer
	numSendOps                  uintptr
	numRecvOps                  uintptr
	launchID                    int32
	nonDonatableInputIndices    unsafe.Pointer
	numNonDonatableInputIndices uintptr
	context                     uintptr
	callLocation                unsafe.Pointer
	numTasks                    uintptr
	taskIDs                     unsafe.Pointer
	incarnationIDs              unsafe.Pointer
}

type cLoadedExecutableExecuteArgs struct {
	structSize           uintptr
	ext                  uintptr
	executable           uintptr
	options              unsafe.Pointer
	argumentLists        unsafe.Pointer
	numDevices           uintptr
	numArgs              uintptr
	outputLists          unsafe.Pointer
	deviceCompleteEvents unsafe.Pointer
	executeDevice        uintptr
}

type cBufferArgs struct { // PJRT_Buffer_Destroy_Args
	structSize uintptr
	ext        uintptr
	buffer     uintptr
}

type cBufferElementTypeArgs struct {
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	typ        int32
}

type cBufferDimensionsArgs struct {
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	dims       unsafe.Pointer
	numDims    uintptr
}

type cBufferOnDeviceSizeArgs struct {
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	size       uintptr
}

type cBufferHandleOutArgs struct { // PJRT_Buffer_Device_Args, _ReadyEvent_Args
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	out        uintptr
}

type cBufferToHostBufferArgs struct {
	structSize uintptr
	ext        uintptr
	src        uintptr
	hostLayout unsafe.Pointer
	dst        unsafe.Pointer
	dstSize    uintptr
	event      uintptr
}

type cBufferIsDeletedArgs struct {
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	isDeleted  bool
}

type cBufferCopyToDeviceArgs struct {
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	dstDevice  uintptr
	dstBuffer  uintptr
}

type cTopologyCreateArgs struct {
	structSize       uintptr
	ext              uintptr
	topologyName     unsafe.Pointer
	topologyNameSize uintptr
	createOptions    unsafe.Pointer
	numOptions       uintptr
	topology         uintptr
}

type cTopologyArgs struct { // PJRT_TopologyDescription_Destroy_Args
	structSize uintptr
	ext        uintptr
	topology   uintptr
}

type cTopologyStringArgs struct { // PJRT_TopologyDescription_PlatformName/_PlatformVersion_Args
	structSize uintptr
	ext        uintptr
	topology   uintptr
	str        unsafe.Pointer
	strSize    uintptr
}

type cTopologyGetDeviceDescriptionsArgs struct {
	structSize      uintptr
	ext             uintptr
	topology        uintptr
	descriptions    unsafe.Pointer
	numDescriptions uintptr
}

type cTopologyAttributesArgs struct {
	structSize    uintptr
	ext           uintptr
	topology      uintptr
	attributes    unsafe.Pointer
	numAttributes uintptr
}

type cCompileArgs struct {
	structSize         uintptr
	ext                uintptr
	topology           uintptr
	program            unsafe.Pointer
	compileOptions     unsafe.Pointer
	compileOptionsSize uintptr
	client             uintptr
	executable         uintptr
}

// cExtensionBase is PJRT_Extension_Base, the node of the extension list
// that starts at PJRT_Api.extension_start.
type cExtensionBase struct {
	structSize uintptr
	typ        int32
	next       unsafe.Pointer
}

var structSizes sync.Map // reflect.Type -> uintptr

// structSizeOf returns PJRT_STRUCT_SIZE for T: the offset of its last field
// plus that field's size.
func structSizeOf[T any]() uintptr { return structSizeOfType(reflect.TypeFor[T]()) }

// structSizeOfType is structSizeOf for a struct type given at run time.
func structSizeOfType(t reflect.Type) uintptr {
	if v, ok := structSizes.Load(t); ok {
		return v.(uintptr)
	}
	last := t.Field(t.NumField() - 1)
	size := last.Offset + last.Type.Size()
	structSizes.Store(t, size)
	return size
}

// newArgs allocates a zeroed T on the Go heap with struct_size set. Every
// argument struct starts with the size_t struct_size field.
func newArgs[T any]() *T {
	p := new(T)
	*(*uintptr)(unsafe.Pointer(p)) = structSizeOf[T]()
	return p
}
