/* shard-plan: shared declarations of the tool's files. */
#ifndef SHARD_PLAN_TOOL_H
#define SHARD_PLAN_TOOL_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "gguf/shard.h"

#define SP_TOOL "shard-plan"
#define SP_MAX_FAULTS 32

typedef struct sp_args {
    const char *model;
    gguf_shard_opts opts;
    bool json;
    bool verbose;
    bool strict;
    bool force;
    cli_filter filter;       /* --filter: the tensors printed */
    const char *shards_dir;  /* --write-shards */
    bool dump_vllm;          /* --dump-format vllm */
    const char *fault_specs[SP_MAX_FAULTS]; /* --fault FAULT[@LAYER] as written */
    gguf_fault faults[SP_MAX_FAULTS];
    int64_t fault_layers[SP_MAX_FAULTS];    /* -1: all layers (or --fault-layer) */
    int n_faults;
    long long fault_layer;   /* --fault-layer (old spelling of @LAYER); -1: not given */
} sp_args;

/* Text report to out. */
void sp_print_text(FILE *out, const gguf_shard_plan *p, const sp_args *a);
/* JSON report to out, one line (schema in docs/shard-plan.md).
 * @return 0, or -1 out of memory or when the write failed. */
int sp_print_json(FILE *out, const gguf_shard_plan *p, const sp_args *a);

/*
 * Write one GGUF per rank into dir plus dir/manifest.txt.
 * @return 0 or a gguf_status (err filled).
 */
int sp_write_shards(const gguf_shard_plan *p, const sp_args *a, const gguf_cancel_flag *cancel,
                    gguf_error *err);

/* shard-plan check-dump (shard_plan_dump.c). */
int sp_check_dump_main(int argc, char **argv);

#endif
