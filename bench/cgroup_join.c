/* What one process's move into a cgroup costs on this host (cgroup v1 hierarchies), measured from
 * a child that does nothing else: the gate's step joins its memory group this way (ADR 0027,
 * "Session 9"; docs/performance.md has the figures).
 *
 *   cc -O2 -o /tmp/cgroup_join bench/cgroup_join.c && /tmp/cgroup_join [ROUNDS] [MEMDIR PIDSDIR]
 *
 * As root. Makes two fresh groups of its own (a memory group beside this process's, a pids group
 * under the pids root: v1), or uses the two directories given, and removes what it made. Per
 * round, interleaved, each case is one vfork'd child that writes "0" to the cgroup.procs fds the
 * case names (opened by the parent, as the gate's are), then _exits; the parent times the child
 * from vfork to waitpid (wall) and each write inside it (wall, CLOCK_MONOTONIC, in memory the
 * vfork'd child shares), and reads the children's CPU (getrusage RUSAGE_CHILDREN).
 *   none        the child writes nothing (the fork/exit/wait floor)
 *   mem         the memory group
 *   pids        the pids group
 *   mem+pids    both, back to back (is the second move cheap right after the first?)
 *   same-group  "0" to the memory group the child is already in (no move, the same lock)
 *   mem tasks   the memory group's `tasks` (v1): the calling thread alone — the kernel skips the
 *               global cgroup_threadgroup_rwsem for a thread moving itself (cgroup_procs_write_start)
 *   both tasks  memory and pids, each through `tasks`
 * GAP_US=N: the pause before each child (default 2000); TASKS=1: the window sweep uses `tasks`.
 * Then: the move's wall time against the pause since the previous move ended (the percpu
 * rwsem's rcu_sync: a writer within a grace period of the last one skips the wait).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double cpu_children_us(void) {
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static int open_file(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) { perror(path); exit(1); }
    return fd;
}

/* the vfork'd child's writes, timed: it shares this memory until it _exits */
static volatile double write_us[2];

/* one child writing "0" to each fd of fds[0..n); returns wall us vfork..waitpid */
static double one_child(const int *fds, int n) {
    double t0 = now_us();
    pid_t pid = vfork();
    if (pid == 0) {
        for (int i = 0; i < n; i++) {
            double a = now_us();
            if (write(fds[i], "0", 1) != 1) _exit(2);
            write_us[i] = now_us() - a;
        }
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    double t = now_us() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status)) { fprintf(stderr, "child failed\n"); exit(1); }
    return t;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double pct(double *v, int n, double p) { qsort(v, n, sizeof *v, cmp); return v[(int)(p * (n - 1))]; }

static char made_mem[4096], made_pids[4096];

static void own_memory_dir(char *out, size_t len) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL;
        if (!p) continue;
        *p = 0;
        if (strstr(c + 1, "memory")) {
            p[1 + strcspn(p + 1, "\n")] = 0;
            snprintf(out, len, "/sys/fs/cgroup/memory%s", strcmp(p + 1, "/") ? p + 1 : "");
            fclose(f);
            return;
        }
    }
    fprintf(stderr, "no v1 memory controller\n");
    exit(1);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    int gap_us = getenv("GAP_US") ? atoi(getenv("GAP_US")) : 2000;
    const char *memdir, *pidsdir;
    char own[4096];
    own_memory_dir(own, sizeof own);
    if (argc > 3) {
        memdir = argv[2], pidsdir = argv[3];
    } else {
        snprintf(made_mem, sizeof made_mem, "%s/gatejoin-bench-%d", own, getpid());
        snprintf(made_pids, sizeof made_pids, "/sys/fs/cgroup/pids/gatejoin-bench-%d", getpid());
        if (mkdir(made_mem, 0755) || mkdir(made_pids, 0755)) { perror("mkdir"); return 1; }
        memdir = made_mem, pidsdir = made_pids;
    }
    int mem = open_file(memdir, "cgroup.procs"), pids = open_file(pidsdir, "cgroup.procs");
    int same = open_file(own, "cgroup.procs"), mem_task = open_file(memdir, "tasks");
    int pids_task = open_file(pidsdir, "tasks");
    enum { NONE, MEM, PIDS, BOTH, SAME, MEM_TASK, BOTH_TASK, NCASE };
    const char *names[NCASE] = {"none", "mem", "pids", "mem+pids", "same-group", "mem tasks", "both tasks"};
    int fds[NCASE][2] = {{0}, {mem}, {pids}, {mem, pids}, {same}, {mem_task}, {mem_task, pids_task}};
    int nfd[NCASE] = {0, 1, 1, 2, 1, 1, 2};
    double *wall[NCASE], *w1[NCASE], *w2[NCASE], cpu[NCASE] = {0};
    for (int c = 0; c < NCASE; c++) {
        wall[c] = calloc(rounds, sizeof(double));
        w1[c] = calloc(rounds, sizeof(double));
        w2[c] = calloc(rounds, sizeof(double));
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < NCASE; k++) {
            int c = (k + r) % NCASE;  /* rotate which case follows which */
            usleep(gap_us);  /* a gate step lasts milliseconds: no move right before this one */
            write_us[0] = write_us[1] = 0;
            double before = cpu_children_us();
            wall[c][r] = one_child(fds[c], nfd[c]);
            cpu[c] += cpu_children_us() - before;
            w1[c][r] = write_us[0];
            w2[c][r] = write_us[1];
        }
    }
    printf("pause before each child %d us; ", gap_us);
    printf("%d rounds, interleaved; microseconds (median / p90); CPU = children's mean\n", rounds);
    printf("  %-11s %16s %16s %16s %10s\n", "case", "child wall", "1st write", "2nd write", "CPU");
    for (int c = 0; c < NCASE; c++) {
        double a = median(wall[c], rounds), a9 = pct(wall[c], rounds, 0.9);
        double b = median(w1[c], rounds), b9 = pct(w1[c], rounds, 0.9);
        double d = median(w2[c], rounds), d9 = pct(w2[c], rounds, 0.9);
        printf("  %-11s %7.1f / %6.1f %7.1f / %6.1f %7.1f / %6.1f %9.1f\n", names[c], a, a9, b, b9, d, d9,
               cpu[c] / rounds);
    }
    /* The rcu_sync window: a move right after another one. */
    printf("a memory-group move, the pause since the previous move (a pids one) ended -> its wall (median)\n");
    int gaps[] = {0, 1000, 5000, 10000, 15000, 20000, 30000};
    for (unsigned g = 0; g < sizeof gaps / sizeof *gaps; g++) {
        double *v = calloc(rounds / 3 + 1, sizeof(double));
        int n = rounds / 3 + 1;
        for (int r = 0; r < n; r++) {
            usleep(20000);
            one_child(&pids, 1);
            if (gaps[g]) usleep(gaps[g]);
            one_child(getenv("TASKS") ? &mem_task : &mem, 1);
            v[r] = write_us[0];
        }
        double mean = 0;
        for (int r = 0; r < n; r++) mean += v[r] / n;
        printf("  pause %6d us: move %7.1f us (p90 %7.1f, mean %7.1f)\n", gaps[g], median(v, n), pct(v, n, 0.9), mean);
        free(v);
    }
    if (made_mem[0]) rmdir(made_mem);
    if (made_pids[0]) rmdir(made_pids);
    return 0;
}
