/* How many threads "one per core" means (cpus.c). Not installed. */
#ifndef GGUF_CPUS_H
#define GGUF_CPUS_H

/* The CPUs this process may run on: its affinity mask (taskset, a container's
 * cpuset), else the online CPUs; at least 1. */
int gguf_cpus_usable(void);

#endif /* GGUF_CPUS_H */
