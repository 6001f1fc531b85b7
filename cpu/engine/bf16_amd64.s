//go:build !purego

#include "textflag.h"

// Round to bfloat16, nearest even, on 8 float32 lanes of Y0 into Y5
// (float32 bits with the low 16 zero). Constants: Y10 0x7fff, Y11 1,
// Y12 0xffff0000, Y13 0x7fffffff, Y14 0x7f800000, Y15 0x00400000.
// A NaN keeps its sign and top payload bits and is made quiet
// (precision.BFloat16).
#define ROUND8 \
	VPSRLD $16, Y0, Y1 \
	VPAND Y11, Y1, Y1 \
	VPADDD Y10, Y1, Y1 \
	VPADDD Y0, Y1, Y1 \
	VPAND Y12, Y1, Y1 \
	VPAND Y13, Y0, Y2 \
	VPCMPGTD Y14, Y2, Y3 \
	VPAND Y12, Y0, Y4 \
	VPOR Y15, Y4, Y4 \
	VPBLENDVB Y3, Y4, Y1, Y5

#define CONSTS \
	MOVL $0x7fff, AX \
	VMOVD AX, X10 \
	VPBROADCASTD X10, Y10 \
	MOVL $1, AX \
	VMOVD AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL $0xffff0000, AX \
	VMOVD AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL $0x7fffffff, AX \
	VMOVD AX, X13 \
	VPBROADCASTD X13, Y13 \
	MOVL $0x7f800000, AX \
	VMOVD AX, X14 \
	VPBROADCASTD X14, Y14 \
	MOVL $0x00400000, AX \
	VMOVD AX, X15 \
	VPBROADCASTD X15, Y15

// func roundBF16AVX2(d, a *float32, n int)
// n is a multiple of 8.
TEXT ·roundBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
	CONSTS
	XORQ BX, BX
round_loop:
	CMPQ BX, CX
	JGE round_done
	VMOVDQU (SI)(BX*4), Y0
	ROUND8
	VMOVDQU Y5, (DI)(BX*4)
	ADDQ $8, BX
	JMP round_loop
round_done:
	VZEROUPPER
	RET

// func narrowBF16AVX2(d *uint16, a *float32, n int)
// n is a multiple of 16.
TEXT ·narrowBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
	CONSTS
	XORQ BX, BX
narrow_loop:
	CMPQ BX, CX
	JGE narrow_done
	VMOVDQU (SI)(BX*4), Y0
	ROUND8
	VPSRLD $16, Y5, Y6
	VMOVDQU 32(SI)(BX*4), Y0
	ROUND8
	VPSRLD $16, Y5, Y7
	// Words of Y6 (elements 0-7) and Y7 (8-15), interleaved by 128-bit
	// lane, then the quadwords put in order.
	VPACKUSDW Y7, Y6, Y8
	VPERMQ $0xD8, Y8, Y8
	VMOVDQU Y8, (DI)(BX*2)
	ADDQ $16, BX
	JMP narrow_loop
narrow_done:
	VZEROUPPER
	RET

// func widenBF16AVX2(d *float32, h *uint16, n int)
// n is a multiple of 8.
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ h+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ BX, BX
widen_loop:
	CMPQ BX, CX
	JGE widen_done
	VPMOVZXWD (SI)(BX*2), Y0
	VPSLLD $16, Y0, Y0
	VMOVDQU Y0, (DI)(BX*4)
	ADDQ $8, BX
	JMP widen_loop
widen_done:
	VZEROUPPER
	RET
