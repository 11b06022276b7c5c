/*
 * gguf/split.h - merge a split GGUF set into one file, or split one model into
 * a set, without ever losing data.
 *
 * The work has three steps, each a function, so a tool can stop after any of
 * them (--dry-run stops after the plan):
 *
 *   1. open the input with gguf_split_open_input() (gguf_set_open of file.h,
 *      with the failing part named in errors): it validates the whole set
 *      before anything is written: every part present and a valid GGUF file
 *      (truncated downloads, Git LFS pointers and HTML pages are named as such),
 *      split.no / split.count / split.tensors.count consistent, versions and
 *      alignments equal, no tensor name twice;
 *   2. make a plan: gguf_merge_plan() or gguf_split_plan_create(). A plan lists
 *      every output file with its tensors and its exact size in bytes, headers
 *      and alignment padding included (so a size limit is a hard limit);
 *   3. gguf_split_execute(): checks the outputs (refuses an existing path unless
 *      overwrite, refuses any path that is one of the inputs by device and inode
 *      whatever its spelling, checks free space with statvfs), then writes each
 *      output through gguf_writer (temporary file, copy_file_range with holes
 *      kept, fsync, rename, fsync of the folder). Optionally verifies XXH3-128
 *      digests of every tensor in the outputs against the inputs, and deletes
 *      the inputs once everything is written, synced and verified.
 *
 * Merged output: part 1's metadata minus every "split.*" key, then every tensor
 * in set order, with the input's alignment and GGUF version. Tensor data is
 * laid out contiguously (GGUF_LAYOUT_CONTIGUOUS, what llama.cpp loads) or so
 * that each input part's data keeps its file offset modulo the file-system
 * block (GGUF_LAYOUT_ALIGNED: kernel copies clone extents on XFS and btrfs).
 * Either way, wherever an input holds a run of tensors in the same relative
 * layout as the output (the usual case: a whole part), the run is copied as
 * one range, padding included.
 * Split parts (as llama.cpp's gguf-split writes them): part 1 carries the model
 * metadata, every part carries split.no (uint16, 0-based), split.count (uint16)
 * and split.tensors.count (int32); parts after the first also carry
 * general.alignment when the model's alignment is not the default 32.
 * Part names: PREFIX-00001-of-0000N.gguf.
 *
 * On any failure (bad input, disk full, I/O error, cancel) every temporary file
 * is removed, outputs already renamed by this call are removed again (a file
 * they replaced under overwrite is not restored), and the inputs are never
 * touched.
 */
#ifndef GGUF_SPLIT_H
#define GGUF_SPLIT_H

#include "gguf/export.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/hash.h"

GGUF_BEGIN_DECLS

#define GGUF_SPLIT_MAX_PARTS 65535u /* split.count is a uint16 */

/*
 * gguf_set_open (file.h) for the input of a merge or split, with the failing
 * part named in the message: "m-00003-of-00010.gguf (part 3 of 10): this is a
 * Git LFS pointer file ...".
 * @return the codes of gguf_set_open, except GGUF_E_INVALID (not GGUF_E_IO)
 *         for a part that is a folder, a device or a pipe: a bad input.
 */
int gguf_split_open_input(gguf_set **out, const char *path, gguf_error *err);

typedef enum gguf_split_kind {
    GGUF_PLAN_MERGE = 0, /* one output, no split.* keys */
    GGUF_PLAN_SPLIT = 1, /* n outputs, each with split.* keys */
} gguf_split_kind;

/* One output file of a plan. */
typedef struct gguf_split_part {
    char *path;           /* output path (owned by the plan) */
    int64_t first;        /* first tensor, index in the input set's order */
    int64_t count;        /* number of tensors: [first, first + count) */
    uint64_t header_size; /* magic, counts, metadata and tensor infos, before padding */
    uint64_t data_size;   /* tensor data with the padding after each tensor */
    uint64_t size;        /* exact size of the file: header + padding + data */
} gguf_split_part;

/*
 * Where a merge puts tensor data.
 *
 * CONTIGUOUS: each tensor right after the previous one, padded to the
 * alignment: the only layout llama.cpp's loader accepts (gguf_init_from_file
 * requires every offset to be the padded end of the previous tensor).
 *
 * ALIGNED: each input part's data starts at an output offset congruent to its
 * input file offset modulo a block (2 MiB, or the output file system's block
 * where larger, and at least the alignment); within a part the input's layout
 * is kept. The gap before a part (less than a block) is a hole: it takes no
 * disk space. Copies are then aligned on both sides, so XFS and btrfs (and
 * other file systems that share extents) clone the data instead of copying it
 * (the merge takes no new space), and elsewhere the kernel copies whole
 * page-cache folios (on Linux 6.18 ext4, about a third faster than a copy that
 * shifts the data by a few KiB, fsync included). Valid
 * GGUF (every offset a multiple of the alignment; gguf-py, ggufkit and other
 * readers that follow the offsets read it), identical tensors and metadata,
 * but llama.cpp refuses to load it.
 *
 *   input part k:  | header_k | pad | t0 | p | t1 | p |
 *                                   ^ Q_k
 *   merged:        | header | pad | part 0 data |hole| part 1 data | ...
 *                                                    ^ P_k = Q_k (mod block)
 */
typedef enum gguf_merge_layout {
    GGUF_LAYOUT_CONTIGUOUS = 0,
    GGUF_LAYOUT_ALIGNED = 1,
} gguf_merge_layout;

/* A plan is plain data, read-only for the caller; free with gguf_split_plan_free. */
typedef struct gguf_split_plan {
    gguf_split_kind kind;
    uint32_t n_parts;
    gguf_split_part *parts;
    int64_t n_tensors;    /* tensors of the input set */
    uint64_t total_size;  /* sum of the parts' sizes */
    uint32_t alignment;   /* of the input, kept in every output */
    uint32_t version;     /* GGUF version of the input, kept */
    gguf_merge_layout layout; /* CONTIGUOUS for every split */
    uint32_t block;       /* ALIGNED: the block offsets are kept modulo; else 0 */
    uint64_t *offsets;    /* per input tensor (set order): its data offset in its output,
                           * relative to that output's data section */
} gguf_split_plan;

/* Limits of a split. A part holds at least one tensor (except a metadata-only first part). */
typedef struct gguf_split_limits {
    uint64_t max_tensors;       /* tensors per part; 0: no limit */
    uint64_t max_size;          /* bytes per part file, everything counted; 0: no limit */
    bool no_tensor_first_split; /* part 1 holds only the metadata */
} gguf_split_limits;

#define GGUF_LAYOUT_BLOCK_DEFAULT (2u << 20) /* the largest page-cache folio on x86-64 */
#define GGUF_LAYOUT_BLOCK_MAX (16u << 20)

typedef struct gguf_merge_opts {
    unsigned int version; /* GGUF_MERGE_OPTS_VERSION, or 0 for the same (see below) */
    gguf_merge_layout layout;
    /* ALIGNED: the block to keep offsets modulo, a power of two up to
     * GGUF_LAYOUT_BLOCK_MAX; 0: GGUF_LAYOUT_BLOCK_DEFAULT, or the f_bsize of
     * the output folder's file system (statvfs) where larger. Raised to at
     * least 4096 and the alignment. */
    uint32_t block;
} gguf_merge_opts;
/* The layout version of gguf_merge_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_MERGE_OPTS_VERSION 1
/* The defaults, version set: gguf_merge_opts o = GGUF_MERGE_OPTS_INIT; */
#define GGUF_MERGE_OPTS_INIT {.version = GGUF_MERGE_OPTS_VERSION}

/*
 * Plan the merge of `in` into the single file `output`; opts may be NULL
 * (contiguous layout).
 * @return 0; GGUF_E_NOMEM; GGUF_E_OVERFLOW; GGUF_E_INVALID (bad args, a block
 *         that is not a power of two up to 1 MiB).
 */
int gguf_merge_plan_opts(gguf_split_plan **out, const gguf_set *in, const char *output,
                         const gguf_merge_opts *opts, gguf_error *err);

/* gguf_merge_plan_opts with the contiguous layout. */
int gguf_merge_plan(gguf_split_plan **out, const gguf_set *in, const char *output,
                    gguf_error *err);

/* Name of a layout: "contiguous", "aligned". */
const char *gguf_merge_layout_name(gguf_merge_layout layout);

/*
 * Plan a split of `in` into PREFIX-NNNNN-of-MMMMM.gguf files. With neither
 * limit set, max_tensors is 128 (llama.cpp's default). Tensors are packed
 * greedily in set order; a part is closed when the next tensor would break a
 * limit (part 1 may so end up with the metadata only, when the metadata leaves
 * no room for the first tensor). Sizes count the part's own header (its metadata, split keys and
 * tensor infos) and every padding byte, so no part file exceeds max_size.
 * @return 0; GGUF_E_LIMIT (a single tensor, or the metadata of part 1, does
 *         not fit max_size; more than 65535 parts; the names are too long);
 *         GGUF_E_NOMEM; GGUF_E_OVERFLOW; GGUF_E_INVALID.
 */
int gguf_split_plan_create(gguf_split_plan **out, const gguf_set *in, const char *prefix,
                           const gguf_split_limits *lim, gguf_error *err);

void gguf_split_plan_free(gguf_split_plan *p);

/*
 * Bytes the metadata pair would take in a GGUF file (key length, key, type,
 * value). Returns 0 when the value is malformed.
 */
uint64_t gguf_split_kv_bytes(const char *key, const gguf_value *v);

/* True for the keys a merge drops ("split." and anything under it). */
bool gguf_split_is_split_key(const char *key);

/*
 * Check the outputs of a plan before writing: none is one of the input parts
 * (same st_dev and st_ino, whatever the spelling: symlinks, hard links, "./"),
 * none exists unless overwrite, each folder exists, and the file system of each
 * folder has room (an estimate that counts holes of sparse inputs as free; for
 * an aligned merge onto a file system that shares the inputs' blocks, probed
 * by cloning a block of each part into an unnamed temporary file, only the
 * headers and a few blocks a part).
 * @return 0; GGUF_E_EXISTS; GGUF_E_NOT_FOUND (no such folder); GGUF_E_NOSPACE;
 *         GGUF_E_IO.
 */
int gguf_split_check_outputs(const gguf_set *in, const gguf_split_plan *p, bool overwrite,
                             gguf_error *err);

/* Phases reported to the progress callback. */
enum { GGUF_SPLIT_PHASE_COPY = 0, GGUF_SPLIT_PHASE_VERIFY = 1 };

/* Called from the calling thread with bytes done out of total in a phase. */
typedef void (*gguf_split_progress_fn)(void *ctx, int phase, uint64_t done, uint64_t total);

typedef struct gguf_split_job_opts {
    unsigned int version; /* GGUF_SPLIT_JOB_OPTS_VERSION, or 0 for the same (see below) */
    bool overwrite;      /* replace existing outputs (never an input) */
    bool no_sync;        /* skip fsync (scratch files, tests) */
    bool verify;         /* after writing: every tensor's digest equals its input's (inputs
                          * are digested just before each chunk is copied, so they are read
                          * from disk once; outputs are reopened and digested afterwards) */
    bool digests;        /* compute digests for a manifest (tensors, model, each output file) */
    bool delete_inputs;  /* implies verify: delete input parts once all is verified */
    int n_threads;       /* digest threads; 0: one per usable CPU */
    /* Polled throughout; non-zero makes the call fail with GGUF_E_INTERRUPTED.
     * Set it from a SIGINT/SIGTERM handler. */
    const gguf_cancel_flag *cancel;
    gguf_split_progress_fn progress; /* may be NULL */
    void *progress_ctx;
} gguf_split_job_opts;
/* The layout version of gguf_split_job_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_SPLIT_JOB_OPTS_VERSION 1
/* The defaults, version set: gguf_split_job_opts o = GGUF_SPLIT_JOB_OPTS_INIT; */
#define GGUF_SPLIT_JOB_OPTS_INIT {.version = GGUF_SPLIT_JOB_OPTS_VERSION}

/* What an execution did; free with gguf_split_report_free. */
typedef struct gguf_split_report {
    uint32_t n_outputs;
    uint64_t bytes_written;       /* sum of output sizes (holes included) */
    uint64_t n_ranges;            /* copies issued: one per run of tensors that keeps the
                                   * input's relative layout (a whole part, usually),
                                   * one per tensor elsewhere */
    double seconds_copy;          /* writing, input digests, fsync and rename included */
    double seconds_digest;        /* reading the outputs back for digests (verification
                                   * and/or manifest); 0 when neither was asked for */
    double seconds_verify;        /* seconds_digest when verified, else 0 */
    bool verified;                /* every tensor digest compared equal */
    bool have_digests;            /* the digest arrays below are filled */
    int64_t n_tensors;
    gguf_digest *tensor_digests;  /* input tensors in set order (have_digests) */
    gguf_digest model_digest;     /* see hash.h (have_digests) */
    gguf_digest *file_digests;    /* one per output file (have_digests) */
    uint32_t n_deleted;           /* input parts deleted (delete_inputs) */
} gguf_split_report;

/*
 * Execute a plan made from `in`: gguf_split_check_outputs, then write every
 * output, then verify / digest / delete as asked. report may be NULL.
 * Inputs are deleted only when every output is in place (fsynced, renamed,
 * folder fsynced) and every tensor of every output verified, reading the
 * outputs back from the device (their cached pages are dropped first); parts
 * are then unlinked in order and their folder fsynced.
 * @return 0; the codes of gguf_split_check_outputs; GGUF_E_IO; GGUF_E_NOSPACE
 *         (ENOSPC, EDQUOT, EFBIG); GGUF_E_INTERRUPTED; GGUF_E_TRUNCATED (an
 *         input shrank while copying); GGUF_E_MISMATCH (verification failed:
 *         the outputs are removed, the inputs kept); GGUF_E_NOMEM.
 */
int gguf_split_execute(const gguf_set *in, const gguf_split_plan *p,
                       const gguf_split_job_opts *opts, gguf_split_report **report,
                       gguf_error *err);

void gguf_split_report_free(gguf_split_report *r);

/*
 * Write the manifest of an execution (report with have_digests) as JSON to
 * path, atomically (temporary file, fsync, rename). Schema
 * "ggufkit.merge-manifest/1":
 *   { "schema", "operation": "merge"|"split", "inputs": [{"path","size"}],
 *     "outputs": [{"path","size","xxh3_128"}], "model_xxh3_128",
 *     "tensors": [{"name","type","shape":[ne...],"nbytes","output","xxh3_128"}] }
 * Digests are 32 hex digits as gguf_digest_hex prints them.
 * @return 0; GGUF_E_INVALID (no digests); GGUF_E_EXISTS (exists and !overwrite, or
 *         it is an input or an output); GGUF_E_IO; GGUF_E_NOMEM.
 */
int gguf_split_manifest_write(const char *path, const gguf_set *in, const gguf_split_plan *p,
                              const gguf_split_report *r, bool overwrite, gguf_error *err);

/*
 * Check a manifest path before any work: not one of the inputs (device and
 * inode) nor of the plan's outputs, and not existing unless overwrite.
 * gguf_split_manifest_write checks the same.
 * @return 0; GGUF_E_EXISTS; GGUF_E_INVALID.
 */
int gguf_split_check_manifest(const char *path, const gguf_set *in, const gguf_split_plan *p,
                              bool overwrite, gguf_error *err);

GGUF_END_DECLS
#endif /* GGUF_SPLIT_H */
