/* ref-forward: the pieces of the tool and how main() dispatches to them.
 *   ref-forward [run] MODEL.gguf [OPTIONS]   refwd_run.c (the forward pass)
 *   ref-forward compare A.gguf B.gguf        refwd_compare.c (records; see refwd_compare.h)
 *   ref-forward check-engine MODEL --url URL refwd_check_engine.c (a serving engine; refwd_engine.h)
 *   ref-forward kld-base / kld MODEL ...     refwd_kld.c (llama.cpp's KL-divergence files)
 *   ref-forward serve MODEL.gguf             refwd_serve.c (OpenAI-compatible HTTP server)
 *   ref-forward import-dump DIR --map MAP    refwd_import.c (engine dumps -> a record)
 * A subcommand file exports one `int NAME_main(int argc, char **argv)`
 * taking argv[0] = the subcommand name. */
#ifndef REF_FORWARD_H
#define REF_FORWARD_H

#define REF_FORWARD_TOOL "ref-forward"

int refwd_run_main(int argc, char **argv);
int refwd_compare_main(int argc, char **argv);
int refwd_check_engine_main(int argc, char **argv);
int refwd_kld_base_main(int argc, char **argv);
int refwd_kld_main(int argc, char **argv);
int refwd_serve_main(int argc, char **argv);
int refwd_import_main(int argc, char **argv);

#endif
