/* ref-forward --backend cuda --tp N (see refwd_gputp.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "gguf/hash.h"
#include "gguf/record.h"
#include "gguf/run.h"
#include "ref_forward.h"
#include "refwd_compare.h"
#include "refwd_gputp.h"

#if defined(GGUFKIT_HAVE_CUDA)
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/forward_cuda.h"
#include "ggufkit_cuda/forward_cuda_tp.h"
#include "ggufkit_cuda/nccl_comm.h"

static double tp_timeout(void)
{
    const char *s = getenv("GGUFKIT_TP_TIMEOUT");
    double v = s ? atof(s) : 0;
    return v > 0 ? v : 600;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The plan of the run, fault included, the same in every process. */
static int make_plan(const refwd_gpu_tp_args *a, gguf_shard_plan **plan, gguf_error *err)
{
    gguf_shard_opts so = {.tp = a->tp, .ep = a->ep, .engine = a->engine};
    int rc = gguf_shard_plan_create(plan, a->m, &so, err);
    return rc || !a->inject ? rc : gguf_shard_apply_fault_spec(*plan, a->inject, err);
}

static void base_meta(const refwd_gpu_tp_args *a, gguf_record_meta *rm, const char *digest)
{
    memset(rm, 0, sizeof *rm);
    rm->model_digest = digest;
    rm->tokens = a->tokens;
    rm->n_tokens = (uint64_t)a->n_tokens;
    rm->precision = "f32";
    rm->tp = rm->ep = rm->ranks = 1;
    rm->plan_digest = "";
    rm->arch = gguf_model_hparams(a->m)->arch_name;
    rm->fault = "";
}

/* One rank (a process started by the launcher, or by mpirun): its captures
 * into a scratch record that the launcher merges. */
static int run_rank(const refwd_gpu_tp_args *a, int rank, int world, const char *rdv,
                    const char *out)
{
    gguf_error err = {0};
    gguf_shard_plan *plan = NULL;
    gguf_nccl_comm *comm = NULL;
    gguf_fwd_ctx *ctx = NULL;
    int n_dev = 0;
    int rc = gguf_cuda_device_count(&n_dev, &err);
    const char *dev_env = getenv("GGUFKIT_DEVICE");
    const int device = dev_env ? atoi(dev_env) : (n_dev > 0 ? rank % n_dev : 0);
    if (!rc && world != a->tp)
        rc = gguf_error_setf(&err, GGUF_E_INVALID, 0, "world size %d, but --tp %d", world, a->tp);
    if (!rc)
        rc = make_plan(a, &plan, &err);
    if (!rc)
        rc = gguf_nccl_comm_create(&comm, rank, world, device, rdv, tp_timeout(), &err);
    {
        gguf_cuda_fwd_opts co = {0};
        co.host_register = a->host_register;
        if (!rc)
            rc = gguf_cuda_tp_ctx_create(&ctx, a->m, plan, comm, &a->fo, &co, &err);
    }
    gguf_run_record_opts ro = {.no_sync = true, .plan = plan, .model_digest = ""};
    if (!rc)
        rc = gguf_run_record(ctx, a->set, a->tokens, a->n_tokens, out, &ro, &err);
    if (rc) {
        char msg[900];
        snprintf(msg, sizeof msg, "rank %d: %s", rank, err.message);
        gguf_error_setf(&err, rc, err.sys_errno, "%.760s", msg);
        cli_error(REF_FORWARD_TOOL, &err);
    }
    gguf_fwd_ctx_free(ctx);
    gguf_nccl_comm_free(comm);
    gguf_shard_plan_free(plan);
    return rc ? cli_exit_code(rc) : CLI_EXIT_OK;
}

/* The single-GPU reference record. */
static int run_reference(const refwd_gpu_tp_args *a, const char *path, const char *digest,
                         gguf_error *err)
{
    gguf_fwd_ctx *ctx = NULL;
    int rc = gguf_cuda_fwd_ctx_create(&ctx, a->m, &a->fo, NULL, err);
    gguf_run_record_opts ro = {.no_sync = true, .model_digest = digest};
    if (!rc)
        rc = gguf_run_record(ctx, a->set, a->tokens, a->n_tokens, path, &ro, err);
    gguf_fwd_ctx_free(ctx);
    return rc;
}

/* Every rank's record into one, with the ranks. */
static int merge(const refwd_gpu_tp_args *a, char paths[][4200], const char *out,
                 const char *digest, bool final, gguf_error *err)
{
    gguf_record_meta rm;
    base_meta(a, &rm, digest);
    rm.backend = "cuda-nccl";
    rm.tp = (uint32_t)a->tp;
    rm.ep = a->ep > 1 ? (uint32_t)a->ep : 1;
    rm.ranks = (uint32_t)a->tp;
    rm.fault = a->inject ? a->inject : "";
    gguf_record_opts ro = {0};
    ro.overwrite = true;
    ro.no_sync = !final;
    gguf_record_writer *w = NULL;
    int rc = gguf_record_writer_create(&w, out, &rm, &ro, err);
    for (int r = 0; !rc && r < a->tp; r++) {
        gguf_record *rec = NULL;
        if ((rc = gguf_record_open(&rec, paths[r], err)))
            break;
        for (int64_t i = 0; !rc && i < gguf_record_capture_count(rec); i++) {
            const gguf_capture *c = gguf_record_capture_at(rec, i);
            rc = gguf_record_add(w, c->point, c->rank, c->n_dims, c->ne, c->data, err);
        }
        gguf_record_free(rec);
    }
    if (!rc)
        rc = gguf_record_writer_finish(w, err);
    gguf_record_writer_free(w);
    return rc;
}

static void stop_all(pid_t *pid, int n)
{
    for (int r = 0; r < n; r++)
        if (pid[r] > 0)
            kill(pid[r], SIGTERM);
    sleep(1);
    for (int r = 0; r < n; r++)
        if (pid[r] > 0) {
            kill(pid[r], SIGKILL);
            waitpid(pid[r], NULL, 0);
            pid[r] = 0;
        }
}

int refwd_gpu_tp(const refwd_gpu_tp_args *a)
{
    /* a rank: started by the launcher below, or by mpirun */
    const char *rk = getenv("GGUFKIT_RANK"), *ws = getenv("GGUFKIT_WORLD");
    if (!rk && getenv("OMPI_COMM_WORLD_RANK")) {
        rk = getenv("OMPI_COMM_WORLD_RANK");
        ws = getenv("OMPI_COMM_WORLD_SIZE");
    } else if (!rk && getenv("PMI_RANK")) {
        rk = getenv("PMI_RANK");
        ws = getenv("PMI_SIZE");
    }
    if (rk) {
        const char *rdv = getenv("GGUFKIT_RDV"), *out = getenv("GGUFKIT_RANK_RECORD");
        if (!ws || !rdv || !out) {
            cli_errorf(REF_FORWARD_TOOL, "a rank needs GGUFKIT_WORLD (or the MPI size), "
                                         "GGUFKIT_RDV and GGUFKIT_RANK_RECORD");
            return CLI_EXIT_USAGE;
        }
        return run_rank(a, atoi(rk), atoi(ws), rdv, out);
    }

    gguf_error err = {0};
    int n_dev = 0;
    int rc = gguf_cuda_device_count(&n_dev, &err);
    if (rc) {
        cli_error(REF_FORWARD_TOOL, &err);
        return cli_exit_code(rc);
    }
    if (n_dev < a->tp) {
        cli_errorf(REF_FORWARD_TOOL, "--backend cuda --tp %d: this host has %d GPU(s); run "
                                     "under mpirun across hosts, or --tp without --backend cuda "
                                     "for the CPU virtual ranks",
                   a->tp, n_dev);
        return CLI_EXIT_ENV;
    }
    if (!gguf_nccl_available()) {
        cli_errorf(REF_FORWARD_TOOL, "--backend cuda --tp: this build has no NCCL");
        return CLI_EXIT_ENV;
    }
    /* the plan must build (and the fault apply) before any rank starts */
    {
        gguf_shard_plan *plan = NULL;
        rc = make_plan(a, &plan, &err);
        gguf_shard_plan_free(plan);
        if (rc) {
            cli_error(REF_FORWARD_TOOL, &err);
            return cli_exit_code(rc);
        }
    }
    if (a->tp > 64) {
        cli_errorf(REF_FORWARD_TOOL, "--backend cuda --tp %d: at most 64 ranks on one host", a->tp);
        return CLI_EXIT_USAGE;
    }
    const char *td = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ref-forward-tp-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(dir)) {
        cli_errorf(REF_FORWARD_TOOL, "cannot make a temporary folder: %s", strerror(errno));
        return CLI_EXIT_ENV;
    }
    char rdv[4200], paths[64][4200], merged[4200], ref[4200];
    snprintf(rdv, sizeof rdv, "%s/rendezvous", dir);
    snprintf(merged, sizeof merged, "%s/tp.gguf", dir);
    snprintf(ref, sizeof ref, "%s/reference.gguf", dir);
    int ret = CLI_EXIT_ENV;
    pid_t pid[64] = {0};
    for (int r = 0; r < a->tp; r++)
        snprintf(paths[r], sizeof paths[r], "%s/rank%d.gguf", dir, r);
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < a->tp; r++) {
        pid[r] = fork();
        if (pid[r] < 0) {
            cli_errorf(REF_FORWARD_TOOL, "cannot start rank %d: %s", r, strerror(errno));
            stop_all(pid, r);
            goto done;
        }
        if (pid[r] == 0) {
            char v[32];
            snprintf(v, sizeof v, "%d", r);
            setenv("GGUFKIT_RANK", v, 1);
            snprintf(v, sizeof v, "%d", a->tp);
            setenv("GGUFKIT_WORLD", v, 1);
            setenv("GGUFKIT_RDV", rdv, 1);
            setenv("GGUFKIT_RANK_RECORD", paths[r], 1);
            execv("/proc/self/exe", a->argv);
            _exit(CLI_EXIT_ENV);
        }
    }
    {
        const double deadline = now_s() + tp_timeout() + 120;
        int left = a->tp, bad = -1, bad_code = 0;
        while (left > 0) {
            for (int r = 0; r < a->tp; r++) {
                int st;
                if (pid[r] <= 0 || waitpid(pid[r], &st, WNOHANG) != pid[r])
                    continue;
                pid[r] = 0;
                left--;
                const int code = WIFEXITED(st) ? WEXITSTATUS(st) : CLI_EXIT_ENV;
                if (code && bad < 0) {
                    bad = r;
                    bad_code = code;
                }
            }
            if (bad >= 0 && left > 0) {
                stop_all(pid, a->tp); /* one rank failed: the others cannot finish */
                left = 0;
            }
            if (left > 0 && now_s() > deadline) {
                cli_errorf(REF_FORWARD_TOOL, "--backend cuda --tp: ranks still running after "
                                             "%.0f s; stopping them",
                           tp_timeout() + 120);
                stop_all(pid, a->tp);
                goto done;
            }
            if (left > 0)
                usleep(20000);
        }
        if (bad >= 0) {
            cli_errorf(REF_FORWARD_TOOL, "--backend cuda --tp: rank %d failed (exit %d)", bad,
                       bad_code);
            ret = bad_code == CLI_EXIT_USAGE ? CLI_EXIT_USAGE : CLI_EXIT_ENV;
            goto done;
        }
    }
    {
        gguf_digest dg;
        char hex[GGUF_DIGEST_HEX];
        rc = gguf_digest_set(a->set, NULL, &dg, a->fo.n_threads ? a->fo.n_threads : 1, NULL, &err);
        if (!rc) {
            gguf_digest_hex(&dg, hex);
            rc = merge(a, paths, a->record ? a->record : merged, hex, a->record != NULL, &err);
        }
        if (!rc && !a->compare)
            rc = run_reference(a, ref, hex, &err);
        if (rc) {
            cli_error(REF_FORWARD_TOOL, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
    }
    {
        refwd_compare_args ca = {0};
        ca.tol = a->tol;
        ca.html = a->html;
        ca.json = a->json;
        ca.model = a->model;
        ca.tmp_a = !a->compare;
        ca.tmp_b = !a->record;
        fflush(stdout);
        ret = refwd_compare_files(a->compare ? a->compare : ref, a->record ? a->record : merged,
                                  &ca, stdout);
    }
done:
    for (int r = 0; r < a->tp; r++)
        unlink(paths[r]);
    unlink(rdv);
    unlink(merged);
    unlink(ref);
    rmdir(dir);
    return ret;
}

#else

int refwd_gpu_tp(const refwd_gpu_tp_args *a)
{
    (void)a;
    cli_errorf(REF_FORWARD_TOOL,
               "--backend cuda: this ref-forward was built without CUDA (no nvcc at build time)");
    return CLI_EXIT_ENV;
}

#endif
