/* ref-forward: dispatch to a subcommand; without one, `run`. */
#include <string.h>

#include "ref_forward.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "compare") == 0)
        return refwd_compare_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "check-engine") == 0)
        return refwd_check_engine_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "kld-base") == 0)
        return refwd_kld_base_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "kld") == 0)
        return refwd_kld_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0)
        return refwd_serve_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return refwd_run_main(argc - 1, argv + 1);
    return refwd_run_main(argc, argv);
}
