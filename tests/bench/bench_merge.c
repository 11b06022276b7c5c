/*
 * bench_merge: merge throughput of libgguf's split module against `cp` of the
 * same bytes and against a plain read/write loop, in the same run, on the same
 * file system; and XXH3-128 verification speed per core.
 *
 *   bench_merge DIR [GIB] [REPS]     (default 2.25 GiB of real data, 3 repetitions)
 *
 * It writes a model of GIB GiB of non-sparse pseudo-random F32 data into DIR,
 * splits it into 4 parts, then times, REPS times each, interleaved:
 *   merge  gguf_split_execute of the 4 parts into one file (fsync, rename)
 *   cp     `cp` of the 4 parts into a folder, then `sync` of the copies (fsync)
 *   loop   read()/write() through a 4 MiB buffer into one file, then fsync
 * and prints the best time of each. Then verification: a merge with --verify
 * (the inputs are digested on the copying thread just before each chunk is
 * copied; the output afterwards, on 1 thread and on all cores), and XXH3-128
 * over an in-memory buffer. Everything it writes is removed at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/hash.h"
#include "gguf/split.h"
#include "gguf/write.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const gguf_error *err)
{
    fprintf(stderr, "bench_merge: %s: %s\n", what, err ? err->message : strerror(errno));
    exit(3);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define CHUNK (4u << 20)

static void make_model(const char *path, int n_tensors)
{
    gguf_writer *w;
    gguf_error err;
    gguf_writer_opts o = {.no_sync = true};
    if (gguf_writer_create(&w, path, &o, &err) ||
        gguf_writer_add_str(w, "general.architecture", "llama", &err))
        die("create", &err);
    for (int i = 0; i < n_tensors; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", i);
        int64_t ne[2] = {8192, 4096}; /* 128 MiB of F32 */
        if (gguf_writer_add_tensor(w, name, GGUF_TYPE_F32, 2, ne, &err))
            die("add_tensor", &err);
    }
    uint64_t *buf = malloc(CHUNK), seed = 42;
    for (size_t k = 0; k < CHUNK / 8; k++)
        buf[k] = splitmix(&seed);
    for (int i = 0; i < n_tensors; i++)
        for (int c = 0; c < (128 << 20) / (int)CHUNK; c++) {
            buf[c] ^= (uint64_t)i * 0x100000001ull + 1; /* every chunk differs */
            if (gguf_writer_write(w, buf, CHUNK, &err))
                die("write", &err);
        }
    if (gguf_writer_finish(w, &err))
        die("finish", &err);
    gguf_writer_free(w);
    free(buf);
}

/* Merge the set of `first` into out; returns seconds (copy seconds only when verify_s). */
static double run_merge(const char *first, const char *out, bool verify, int threads,
                        double *verify_s)
{
    gguf_set *s;
    gguf_split_plan *p;
    gguf_split_report *r;
    gguf_error err;
    unlink(out);
    double t0 = now();
    if (gguf_set_open(&s, first, NULL, &err) || gguf_merge_plan(&p, s, out, &err))
        die("merge plan", &err);
    gguf_split_job_opts o = {.verify = verify, .n_threads = threads};
    if (gguf_split_execute(s, p, &o, &r, &err))
        die("merge", &err);
    double t = now() - t0;
    if (verify_s) {
        *verify_s = r->seconds_verify;
        t = r->seconds_copy;
    }
    gguf_split_report_free(r);
    gguf_split_plan_free(p);
    gguf_set_free(s);
    return t;
}

static void run_cp_cleanup(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/cp'", dir);
    if (system(cmd) != 0)
        die("rm", NULL);
}

static double run_cp(const char *dir, char parts[][4096], int n)
{
    char cmd[32768];
    int k = snprintf(cmd, sizeof cmd, "mkdir '%s/cp' && cp", dir);
    for (int i = 0; i < n; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " '%s'", parts[i]);
    k += snprintf(cmd + k, sizeof cmd - (size_t)k, " '%s/cp/' && sync '%s/cp/'*", dir, dir);
    /* mkdir is in the timed command too; it costs microseconds. */
    double t0 = now();
    if (system(cmd) != 0)
        die("cp", NULL);
    return now() - t0;
}

static double run_loop(const char *out, char parts[][4096], int n)
{
    unlink(out);
    double t0 = now();
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *buf = malloc(CHUNK);
    if (fo < 0 || !buf)
        die("loop open", NULL);
    for (int i = 0; i < n; i++) {
        int fi = open(parts[i], O_RDONLY);
        if (fi < 0)
            die("loop open input", NULL);
        ssize_t r;
        while ((r = read(fi, buf, CHUNK)) > 0)
            for (ssize_t done = 0; done < r;) {
                ssize_t k = write(fo, buf + done, (size_t)(r - done));
                if (k < 0)
                    die("loop write", NULL);
                done += k;
            }
        close(fi);
    }
    if (fsync(fo) != 0)
        die("fsync", NULL);
    close(fo);
    free(buf);
    return now() - t0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_merge DIR [GIB] [REPS]\n");
        return 2;
    }
    const char *dir = argv[1];
    double gib = argc > 2 ? atof(argv[2]) : 2.25;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    int n_tensors = (int)(gib * 8 + 0.5); /* 128 MiB each */
    if (n_tensors < 4)
        n_tensors = 4;
    char model[4096], prefix[4096], out[4096], loop_out[4096], parts[4][4096];
    snprintf(model, sizeof model, "%s/bench-model.gguf", dir);
    snprintf(prefix, sizeof prefix, "%s/bench-part", dir);
    snprintf(out, sizeof out, "%s/bench-merged.gguf", dir);
    snprintf(loop_out, sizeof loop_out, "%s/bench-loop.gguf", dir);

    fprintf(stderr, "writing %d tensors of 128 MiB and splitting them in 4 parts...\n",
            n_tensors);
    make_model(model, n_tensors);
    gguf_set *s;
    gguf_split_plan *p;
    gguf_error err;
    gguf_split_limits lim = {.max_tensors = (uint64_t)(n_tensors + 3) / 4};
    gguf_split_job_opts fast = {.no_sync = true};
    if (gguf_set_open(&s, model, NULL, &err) ||
        gguf_split_plan_create(&p, s, prefix, &lim, &err) ||
                               gguf_split_execute(s, p, &fast, NULL, &err))
        die("split", &err);
    int n_parts = (int)p->n_parts;
    uint64_t bytes = 0;
    for (int i = 0; i < n_parts && i < 4; i++) {
        snprintf(parts[i], sizeof parts[i], "%s", p->parts[i].path);
        bytes += p->parts[i].size;
    }
    gguf_split_plan_free(p);
    gguf_set_free(s);
    unlink(model);
    sync();

    double best_m = 1e30, best_c = 1e30, best_l = 1e30;
    /* Interleaved, the order rotating each repetition; outputs are removed and
     * the file system synced before each timing so no run pays for another's
     * writeback or block freeing. */
    for (int r = 0; r < reps; r++) {
        double m = 0, c = 0, l = 0;
        for (int k = 0; k < 3; k++) {
            unlink(out);
            unlink(loop_out);
            run_cp_cleanup(dir);
            sync();
            switch ((k + r) % 3) {
            case 0: m = run_merge(parts[0], out, false, 0, NULL); break;
            case 1: c = run_cp(dir, parts, n_parts); break;
            default: l = run_loop(loop_out, parts, n_parts); break;
            }
        }
        fprintf(stderr, "rep %d: merge %.2f s, cp %.2f s, loop %.2f s\n", r + 1, m, c, l);
        best_m = m < best_m ? m : best_m;
        best_c = c < best_c ? c : best_c;
        best_l = l < best_l ? l : best_l;
    }
    unlink(out);
    unlink(loop_out);
    run_cp_cleanup(dir);
    sync();
    double gb = (double)bytes / 1e9;
    printf("set: %d parts, %.2f GB of tensor data and headers, best of %d, fsync included\n",
           n_parts, gb, reps);
    printf("  %-28s %6.2f s  %6.2f GB/s  %.2fx cp\n", "gguf-merge (library)", best_m,
           gb / best_m, best_c / best_m);
    printf("  %-28s %6.2f s  %6.2f GB/s  1.00x cp\n", "cp + sync", best_c, gb / best_c);
    printf("  %-28s %6.2f s  %6.2f GB/s  %.2fx cp\n", "read/write loop 4 MiB + fsync", best_l,
           gb / best_l, best_c / best_l);

    /* Verification: inputs digested while copying, the output afterwards. */
    double vs = 0;
    unlink(out);
    sync();
    double cv = run_merge(parts[0], out, true, 1, &vs);
    printf("  %-28s %6.2f s  %6.2f GB/s  (copy with input digests, fsync)\n",
           "merge --verify: write", cv, gb / cv);
    printf("  %-28s %6.2f s  %6.2f GB/s per core (output read back and digested)\n",
           "merge --verify: verify, 1 thr", vs, gb / vs);
    unlink(out);
    sync();
    run_merge(parts[0], out, true, 0, &vs);
    printf("  %-28s %6.2f s  %6.2f GB/s (%ld threads)\n", "merge --verify: verify, all", vs,
           gb / vs, sysconf(_SC_NPROCESSORS_ONLN));
    size_t mem = 1u << 30;
    unsigned char *buf = malloc(mem);
    memset(buf, 0x5a, mem);
    gguf_digest d;
    double t0 = now();
    for (int i = 0; i < 3; i++)
        gguf_digest_bytes(buf, mem, &d);
    double t = now() - t0;
    printf("  %-28s %6.2f s  %6.2f GB/s per core (3 x 1 GiB in memory)\n", "XXH3-128 in memory",
           t, 3.0 * (double)mem / 1e9 / t);
    free(buf);

    unlink(out);
    for (int i = 0; i < n_parts; i++)
        unlink(parts[i]);
    run_cp_cleanup(dir);
    return 0;
}
