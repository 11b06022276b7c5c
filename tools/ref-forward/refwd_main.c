/* ref-forward: dispatch to a subcommand (ref_forward.h); without one, `run`. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ref_forward.h"

#ifndef GGUFKIT_HAVE_NETWORK
/* A build without libcurl and libmicrohttpd (GGUFKIT_NETWORK=OFF) has no engine check. */
static int not_built(int argc, char **argv)
{
    (void)argc;
    cli_errorf(REF_FORWARD_TOOL, "%s: not in this build (built without libcurl and "
                                 "libmicrohttpd: configure with -DGGUFKIT_NETWORK=ON)", argv[0]);
    return CLI_EXIT_ENV;
}
#define refwd_serve_main not_built
#define refwd_check_engine_main not_built
#endif

static const struct {
    const char *name;
    int (*main)(int argc, char **argv);
} subcommands[] = {
    {"run", refwd_run_main},
    {"compare", refwd_compare_main},
    {"serve", refwd_serve_main},
    {"import-dump", refwd_import_main},
    {"check-engine", refwd_check_engine_main},
    {"kld-base", refwd_kld_base_main},
    {"kld", refwd_kld_main},
};

int main(int argc, char **argv)
{
    for (size_t i = 0; argc >= 2 && i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (strcmp(argv[1], subcommands[i].name) == 0)
            return subcommands[i].main(argc - 1, argv + 1);
    return refwd_run_main(argc, argv);
}
