/* The online CPUs overstate what a process may use under taskset or in a
 * container limited to a cpuset: threads beyond the mask share its cores
 * and every "one thread per core" default would oversubscribe them. */
#include "util/cpus.h"

#include <limits.h>
#include <sched.h>
#include <unistd.h>

int gguf_cpus_usable(void)
{
#ifdef __linux__
    cpu_set_t set;
    /* fails on hosts of more than CPU_SETSIZE (1024) CPUs: then the online count */
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
#endif
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
}
