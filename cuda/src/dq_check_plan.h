/*
 * The arithmetic of the GPU dequant checker (cuda_dq_check.cu, header
 * ggufkit_cuda/cuda_dq_check.h): how many elements of a type one slot holds,
 * and where a caller's CPU result lies relative to the slots' host buffers.
 * Plain C without CUDA, so that tests/unit/test_dq_check_plan.c checks it on
 * any machine. Not installed.
 */
#ifndef GGUFKIT_DQ_CHECK_PLAN_H
#define GGUFKIT_DQ_CHECK_PLAN_H

#include <stdint.h>

/*
 * Elements of a type (blocks of block_size elements in type_size bytes) that
 * fit in slot_floats floats and slot_bytes quantized bytes: whole blocks, and
 * for plain types (block_size 1) a multiple of 8 elements, so that every
 * piece but a tensor's last takes the dequant kernels' 8-element units whole.
 * 0 when not one block (or 8 plain elements) fits, or for a zero size.
 */
static inline int64_t dqc_slot_elems(uint32_t block_size, uint32_t type_size,
                                     int64_t slot_floats, uint64_t slot_bytes)
{
    if (block_size == 0 || type_size == 0 || slot_floats <= 0)
        return 0;
    uint64_t blocks = (uint64_t)slot_floats / block_size;
    const uint64_t by_bytes = slot_bytes / type_size;
    if (by_bytes < blocks)
        blocks = by_bytes;
    if (block_size == 1)
        blocks &= ~(uint64_t)7;
    return (int64_t)(blocks * block_size);
}

/* Where a CPU result lies (dqc_ref_slot). */
enum {
    DQC_REF_OUTSIDE = -1, /* outside every slot buffer: the checker copies it */
    DQC_REF_OVERLAP = -2  /* partly inside a slot buffer, or inside but not at its
                             start, or longer than it: a misuse */
};

/*
 * The bytes [p, p + bytes) against n_bufs buffers of buf_bytes bytes starting
 * at bufs[i]: the index i of the buffer they start at and fit in,
 * DQC_REF_OUTSIDE when they touch none, DQC_REF_OVERLAP otherwise. Addresses
 * as integers (comparing pointers into different objects is undefined in C).
 * bytes == 0 is outside.
 */
static inline int dqc_ref_slot(uintptr_t p, uint64_t bytes, const uintptr_t *bufs, int n_bufs,
                               uint64_t buf_bytes)
{
    if (bytes == 0)
        return DQC_REF_OUTSIDE;
    /* [p, p + bytes) as [p, last]: p + bytes may wrap at the top of memory */
    const uintptr_t last = p + (uintptr_t)(bytes - 1);
    if (last < p)
        return DQC_REF_OVERLAP;
    int found = DQC_REF_OUTSIDE;
    for (int i = 0; i < n_bufs; i++) {
        if (buf_bytes == 0)
            break;
        const uintptr_t b = bufs[i], b_last = b + (uintptr_t)(buf_bytes - 1);
        if (last < b || p > b_last)
            continue; /* disjoint */
        if (p == b && bytes <= buf_bytes && found == DQC_REF_OUTSIDE)
            found = i;
        else
            return DQC_REF_OVERLAP;
    }
    return found;
}

#endif /* GGUFKIT_DQ_CHECK_PLAN_H */
