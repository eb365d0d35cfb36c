/* probe: one small attacker with many verbs, run INSIDE the cage by tests/cage.
 *
 * Usage: probe VERB [ARGS...]
 * Exit 0 and print "ok[ detail]" when the action worked; exit 1 and print the errno name
 * (e.g. "EPERM") when the kernel refused it; exit 2 on a usage error.
 * Raw syscalls are used where libc would hide what the kernel sees (64-bit arguments,
 * clone flags, x32 and i386 entry points).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/netlink.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/uio.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <arpa/inet.h>

extern char **environ;

static int fail(void) {
    const char *name = strerrorname_np(errno);
    printf("%s\n", name ? name : "E?");
    return 1;
}

static int ok(const char *detail) {
    printf(detail ? "ok %s\n" : "ok\n", detail);
    return 0;
}

#define CHECK(expr) do { if ((long)(expr) < 0) return fail(); } while (0)

static unsigned long num(const char *s) { return strtoull(s, NULL, 0); }

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static socklen_t unix_addr(struct sockaddr_un *a, const char *path, int abstract) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (abstract) {
        memcpy(a->sun_path + 1, path, n);
        return offsetof(struct sockaddr_un, sun_path) + 1 + n;
    }
    memcpy(a->sun_path, path, n);
    return sizeof *a;
}

static pid_t paused_child(void) {
    pid_t pid = fork();
    if (pid == 0) { pause(); _exit(0); }
    return pid;
}

static int reap(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return status;
}

static int caps(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    CHECK(syscall(SYS_capget, &h, d));
    unsigned long long eff = d[0].effective | (unsigned long long)d[1].effective << 32;
    unsigned long long prm = d[0].permitted | (unsigned long long)d[1].permitted << 32;
    unsigned long long inh = d[0].inheritable | (unsigned long long)d[1].inheritable << 32;
    int bnd = 0, amb = 0;
    for (int c = 0; c <= 63; c++) {
        if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1) bnd++;
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) == 1) amb++;
    }
    printf("ok eff=%llx prm=%llx inh=%llx bnd=%d amb=%d euid=%d\n", eff, prm, inh, bnd, amb, geteuid());
    return 0;
}

static int tiocsti(unsigned long cmd) {
    /* Make the pty on stdin our controlling terminal, then push a byte into its input:
     * without the cage this is how a command types into the user's shell. */
    setsid();
    ioctl(0, TIOCSCTTY, 0);
    char c = 'x';
    CHECK(syscall(SYS_ioctl, 0, cmd, &c));
    return ok(NULL);
}


/* A raw system call with integer arguments, for the denylist probes: each argument is a number,
 * or "buf" (a zeroed 4 KiB scratch buffer), "page" (a mapped, page-aligned page), "s:TEXT" (a
 * string), "child" (the pid of a paused child of this probe, killed afterwards). Prints "ok N"
 * or the errno name, so the filter's EPERM tells apart from the kernel's own answer. */
static int raw_syscall(int argc, char **argv) {
    static char buf[4096] __attribute__((aligned(64)));
    long args[6] = {0};
    pid_t child = 0;
    char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return fail();
    page[0] = 1;
    for (int i = 3; i < argc && i < 9; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "buf")) args[i - 3] = (long)buf;
        else if (!strcmp(s, "page")) args[i - 3] = (long)page;
        else if (!strncmp(s, "s:", 2)) args[i - 3] = (long)(s + 2);
        else if (!strcmp(s, "child")) args[i - 3] = child = paused_child();
        else args[i - 3] = (long)strtoull(s, NULL, 0);
    }
    long r = syscall(num(argv[2]), args[0], args[1], args[2], args[3], args[4], args[5]);
    int err = errno;
    if (child > 0) { kill(child, SIGKILL); reap(child); }
    errno = err;
    if (r < 0) return fail();
    printf("ok %ld\n", r);
    return 0;
}

/* A system call that needs a child process: fork a paused child and aim the call at it. */
static int at_child(const char *what) {
    pid_t pid = paused_child();
    long r;
    static char local[8], remote[8] = "x";
    struct iovec l = {local, sizeof local}, rv = {remote, sizeof remote};
    if (!strcmp(what, "process_vm_readv")) r = syscall(SYS_process_vm_readv, pid, &l, 1, &rv, 1, 0);
    else if (!strcmp(what, "process_vm_writev")) r = syscall(SYS_process_vm_writev, pid, &l, 1, &rv, 1, 0);
    else if (!strcmp(what, "pidfd_getfd")) {
        int fd = (int)syscall(SYS_pidfd_open, pid, 0);
        r = fd < 0 ? -1 : syscall(SYS_pidfd_getfd, fd, 1, 0);
    } else { errno = EINVAL; r = -1; }
    int err = errno;
    kill(pid, SIGKILL); reap(pid);
    errno = err;
    CHECK(r); return ok(NULL);
}

/* mode CALL PATH MODE: set or create with MODE through one of the calls that take a mode. */
static int with_mode(const char *call, const char *path, unsigned long mode) {
    long r;
    int excl = O_WRONLY | O_CREAT | O_EXCL;
    if (!strcmp(call, "chmod")) r = syscall(SYS_chmod, path, mode);
    else if (!strcmp(call, "fchmod")) {
        int fd; CHECK(fd = open(path, O_RDONLY));
        r = syscall(SYS_fchmod, fd, mode);
    }
    else if (!strcmp(call, "fchmodat")) r = syscall(SYS_fchmodat, AT_FDCWD, path, mode);
    else if (!strcmp(call, "fchmodat2")) r = syscall(452, AT_FDCWD, path, mode, 0);
    else if (!strcmp(call, "open")) r = syscall(SYS_open, path, excl, mode);
    else if (!strcmp(call, "openat")) r = syscall(SYS_openat, AT_FDCWD, path, excl, mode);
    else if (!strcmp(call, "openat2")) {
        struct { uint64_t flags, mode, resolve; } how = {excl, mode, 0};
        r = syscall(437, AT_FDCWD, path, &how, sizeof how);
    }
    else if (!strcmp(call, "creat")) r = syscall(SYS_creat, path, mode);
    else if (!strcmp(call, "mkdir")) r = syscall(SYS_mkdir, path, mode);
    else if (!strcmp(call, "mkdirat")) r = syscall(SYS_mkdirat, AT_FDCWD, path, mode);
    else if (!strcmp(call, "mknod")) r = syscall(SYS_mknod, path, S_IFREG | mode, 0);
    else if (!strcmp(call, "mknodat")) r = syscall(SYS_mknodat, AT_FDCWD, path, S_IFREG | mode, 0);
    else { fprintf(stderr, "probe: unknown mode call %s\n", call); return 2; }
    CHECK(r); return ok(NULL);
}

/* sysv CALL KEY: one SysV IPC call on the object with KEY (made outside by `sysv-make`). */
static int sysv(const char *call, key_t key, const char *text) {
    long r = -1;
    if (!strcmp(call, "shmget")) r = shmget(key, 0, 0);
    else if (!strcmp(call, "msgget")) r = msgget(key, 0);
    else if (!strcmp(call, "semget")) r = semget(key, 0, 0);
    else if (!strcmp(call, "msgget-create")) r = msgget(key, IPC_CREAT | 0600);
    else if (!strcmp(call, "shm-write")) {
        /* the attack: find a host segment by key, attach it, overwrite it */
        int id; CHECK(id = shmget(key, 0, 0));
        char *p = shmat(id, NULL, 0);
        if (p == (void *)-1) return fail();
        strcpy(p, text); shmdt(p); return ok(NULL);
    }
    else {
        /* the others take an id: the caller passes it directly (ids are listed in /proc/sysvipc) */
        int id = (int)key;
        struct { long type; char text[8]; } msg = {1, "x"};
        struct sembuf op = {0, 1, IPC_NOWAIT};
        struct timespec ts = {0, 0};
        struct shmid_ds ds;
        if (!strcmp(call, "shmat")) { void *p = shmat(id, NULL, SHM_RDONLY); r = p == (void *)-1 ? -1 : 0; }
        else if (!strcmp(call, "shmdt")) r = syscall(SYS_shmdt, (void *)4096);
        else if (!strcmp(call, "shmctl")) r = shmctl(id, IPC_STAT, &ds);
        else if (!strcmp(call, "msgsnd")) r = msgsnd(id, &msg, 1, IPC_NOWAIT);
        else if (!strcmp(call, "msgrcv")) r = msgrcv(id, &msg, sizeof msg.text, 0, IPC_NOWAIT);
        else if (!strcmp(call, "msgctl")) { struct msqid_ds q; r = msgctl(id, IPC_STAT, &q); }
        else if (!strcmp(call, "semop")) r = syscall(SYS_semop, id, &op, 1);  /* glibc's uses semtimedop */
        else if (!strcmp(call, "semtimedop")) r = syscall(SYS_semtimedop, id, &op, 1, &ts);
        else if (!strcmp(call, "semctl")) r = semctl(id, 0, GETVAL);
        else { fprintf(stderr, "probe: unknown sysv call %s\n", call); return 2; }
    }
    CHECK(r); printf("ok %ld\n", r); return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *v = argv[1];
    const char *a = argc > 2 ? argv[2] : "";
    const char *b = argc > 3 ? argv[3] : "";
    setvbuf(stdout, NULL, _IONBF, 0);

    if (!strcmp(v, "exit")) return (int)num(a);
    if (!strcmp(v, "read")) {
        int fd; CHECK(fd = open(a, O_RDONLY));
        char buf[256]; ssize_t n; CHECK(n = read(fd, buf, sizeof buf - 1));
        buf[n] = 0; printf("ok %s\n", buf); return 0;
    }
    if (!strcmp(v, "write")) {
        int fd; CHECK(fd = open(a, O_WRONLY | O_APPEND));
        CHECK(write(fd, "x", 1)); return ok(NULL);
    }
    if (!strcmp(v, "create")) { CHECK(open(a, O_WRONLY | O_CREAT | O_EXCL, 0644)); return ok(NULL); }
    if (!strcmp(v, "unlink")) { CHECK(unlink(a)); return ok(NULL); }
    if (!strcmp(v, "mkdir")) { CHECK(mkdir(a, 0755)); return ok(NULL); }
    if (!strcmp(v, "rename")) { CHECK(rename(a, b)); return ok(NULL); }
    if (!strcmp(v, "link")) { CHECK(link(a, b)); return ok(NULL); }
    if (!strcmp(v, "symlink")) { CHECK(symlink(a, b)); return ok(NULL); }
    if (!strcmp(v, "truncate")) { CHECK(truncate(a, 0)); return ok(NULL); }
    if (!strcmp(v, "open-trunc")) { CHECK(open(a, O_WRONLY | O_TRUNC)); return ok(NULL); }
    if (!strcmp(v, "chown")) { CHECK(chown(a, (uid_t)num(b), (gid_t)-1)); return ok(NULL); }
    if (!strcmp(v, "ls")) {
        DIR *d = opendir(a); if (!d) return fail();
        return ok(NULL);
    }
    if (!strcmp(v, "exec")) { execv(a, argv + 2); return fail(); }
    if (!strcmp(v, "caps")) return caps();
    if (!strcmp(v, "env")) {
        printf("ok\n");
        for (char **e = environ; *e; e++) printf("%s\n", *e);
        return 0;
    }

    /* processes */
    if (!strcmp(v, "ptrace")) {
        pid_t pid = strcmp(a, "child") ? (pid_t)num(a) : paused_child();
        long r = ptrace(PTRACE_SEIZE, pid, 0, 0);
        int err = errno;
        if (!strcmp(a, "child")) { kill(pid, SIGKILL); reap(pid); }
        errno = err;
        CHECK(r); return ok(NULL);
    }
    if (!strcmp(v, "kill")) {
        pid_t pid = strcmp(a, "child") ? (pid_t)num(a) : paused_child();
        long r = kill(pid, SIGTERM);
        if (!strcmp(a, "child")) reap(pid);
        CHECK(r); return ok(NULL);
    }
    if (!strcmp(v, "signal")) { CHECK(kill((pid_t)strtol(a, NULL, 0), (int)num(b))); return ok(NULL); }
    if (!strcmp(v, "pidfd-kill")) {
        int fd; CHECK(fd = (int)syscall(SYS_pidfd_open, (pid_t)num(a), 0));
        CHECK(syscall(SYS_pidfd_send_signal, fd, SIGTERM, NULL, 0)); return ok(NULL);
    }
    if (!strcmp(v, "mount")) { CHECK(mount("none", a, "tmpfs", 0, NULL)); return ok(NULL); }
    if (!strcmp(v, "fsopen")) { CHECK(syscall(SYS_fsopen, "tmpfs", 0)); return ok(NULL); }
    if (!strcmp(v, "bpf")) {
        /* BPF_MAP_CREATE of a tiny array map */
        uint32_t attr[16] = {2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1};
        CHECK(syscall(SYS_bpf, 0, attr, sizeof attr)); return ok(NULL);
    }
    if (!strcmp(v, "unshare")) { CHECK(syscall(SYS_unshare, num(a))); return ok(NULL); }
    if (!strcmp(v, "clone")) {
        long pid = syscall(SYS_clone, num(a) | SIGCHLD, 0, 0, 0, 0);
        if (pid == 0) _exit(0);
        CHECK(pid); reap(pid); return ok(NULL);
    }
    if (!strcmp(v, "clone3")) {
        uint64_t args[11] = {0}; args[4] = SIGCHLD;  /* exit_signal */
        long pid = syscall(SYS_clone3, args, sizeof args);
        if (pid == 0) _exit(0);
        CHECK(pid); reap(pid); return ok(NULL);
    }
    if (!strcmp(v, "fork")) {
        pid_t pid = fork();
        if (pid == 0) _exit(7);
        CHECK(pid);
        int st = reap(pid);
        return WIFEXITED(st) && WEXITSTATUS(st) == 7 ? ok(NULL) : 3;
    }
    if (!strcmp(v, "io_uring")) {
        char params[120] = {0};
        CHECK(syscall(SYS_io_uring_setup, 4, params)); return ok(NULL);
    }
    if (!strcmp(v, "forkbomb")) {
        /* Fork up to N paused children; report how many forks succeeded. The supervisor must
         * kill the leftovers. */
        int n = 0, max = (int)num(a);
        while (n < max) {
            pid_t pid = fork();
            if (pid == 0) { pause(); _exit(0); }
            if (pid < 0) break;
            n++;
        }
        printf("ok %d\n", n); return 0;
    }
    if (!strcmp(v, "orphan") || !strcmp(v, "hang")) {
        /* Leave a grandchild that called setsid behind and print its pid; then exit (orphan)
         * or wait forever (hang). The supervisor must kill both. The grandchild takes the
         * name `a` (its comm), so the host can look for it: in a PID namespace the pid printed
         * is the namespace's, not the host's. */
        int p[2]; CHECK(pipe(p));
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            pid_t g = fork();
            if (g == 0) { close(p[0]); close(p[1]); if (*a) prctl(PR_SET_NAME, a); for (;;) pause(); }
            if (write(p[1], &g, sizeof g) < 0) _exit(1);
            _exit(0);
        }
        pid_t g = 0; CHECK(read(p[0], &g, sizeof g)); reap(pid);
        printf("ok %d\n", g);
        if (v[0] == 'h') for (;;) pause();
        return 0;
    }


    /* system calls by number, and those aimed at a child of the probe */
    if (!strcmp(v, "nr")) return raw_syscall(argc, argv);
    if (!strcmp(v, "perf")) {
        /* a software counter on itself, user space only: allowed at perf_event_paranoid 2 */
        struct { uint32_t type, size; uint64_t config, period, sample_type, read_format, flags; } attr;
        memset(&attr, 0, sizeof attr);
        attr.type = 1; attr.size = 64; attr.config = 1;  /* PERF_TYPE_SOFTWARE, TASK_CLOCK */
        attr.flags = (1 << 0) | (1 << 5) | (1 << 6);  /* disabled, exclude_kernel, exclude_hv */
        char full[128] = {0}; memcpy(full, &attr, sizeof attr);
        CHECK(syscall(SYS_perf_event_open, full, 0, -1, -1, 0)); return ok(NULL);
    }
    if (!strcmp(v, "handle")) {
        struct { uint32_t bytes; int type; unsigned char h[128]; } fh = {128};
        int mount_id;
        CHECK(syscall(SYS_name_to_handle_at, AT_FDCWD, ".", &fh, &mount_id, 0)); return ok(NULL);
    }
    if (!strcmp(v, "at-child")) return at_child(a);

    /* modes, SysV IPC, netlink, scheduling */
    if (!strcmp(v, "mode")) return with_mode(a, b, argc > 4 ? num(argv[4]) : 0);
    if (!strcmp(v, "sysv")) return sysv(a, (key_t)strtol(b, NULL, 0), argc > 4 ? argv[4] : "");
    if (!strcmp(v, "sysv-make")) {
        /* outside the cage: a segment (with TEXT), a queue and a semaphore set under KEY */
        key_t key = (key_t)strtol(a, NULL, 0);
        int shm, msq, sem;
        CHECK(shm = shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0600));
        char *p = shmat(shm, NULL, 0);
        if (p == (void *)-1) return fail();
        strcpy(p, b); shmdt(p);
        CHECK(msq = msgget(key, IPC_CREAT | IPC_EXCL | 0600));
        CHECK(sem = semget(key, 1, IPC_CREAT | IPC_EXCL | 0600));
        printf("ok %d %d %d\n", shm, msq, sem); return 0;
    }
    if (!strcmp(v, "sysv-show")) {
        key_t key = (key_t)strtol(a, NULL, 0);
        int shm; CHECK(shm = shmget(key, 0, 0));
        char *p = shmat(shm, NULL, SHM_RDONLY);
        if (p == (void *)-1) return fail();
        printf("ok %.64s\n", p); return 0;
    }
    if (!strcmp(v, "sysv-remove")) {
        key_t key = (key_t)strtol(a, NULL, 0);
        int id;
        if ((id = shmget(key, 0, 0)) >= 0) shmctl(id, IPC_RMID, NULL);
        if ((id = msgget(key, 0)) >= 0) msgctl(id, IPC_RMID, NULL);
        if ((id = semget(key, 0, 0)) >= 0) semctl(id, 0, IPC_RMID);
        return ok(NULL);
    }
    if (!strcmp(v, "netlink")) {
        int s; CHECK(s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, (int)num(a)));
        return ok(NULL);
    }
    if (!strcmp(v, "gai")) {
        struct addrinfo hints = {.ai_flags = AI_ADDRCONFIG, .ai_socktype = SOCK_STREAM}, *res;
        int rc = getaddrinfo(a, "80", &hints, &res);
        if (rc) { printf("%s\n", gai_strerror(rc)); return 1; }
        return ok(NULL);
    }
    if (!strcmp(v, "setpriority")) {
        /* setpriority WHICH WHO NICE (raw: the filter judges what the kernel reads) */
        CHECK(syscall(SYS_setpriority, num(a), num(b), (int)strtol(argv[4], NULL, 0))); return ok(NULL);
    }
    if (!strcmp(v, "own-group-prio")) {
        /* the group forms on a process group holding only this probe (a new session), so that
         * without the filter nothing but the probe itself is touched */
        setsid();  /* fails (harmlessly) where the cage already made it a session leader */
        if (getpgrp() != getpid()) { errno = ENOTRECOVERABLE; return fail(); }
        if (!strcmp(a, "setpriority")) CHECK(syscall(SYS_setpriority, 1 /* PRIO_PGRP */, 0, 5));
        else CHECK(syscall(SYS_ioprio_set, 2 /* IOPRIO_WHO_PGRP */, 0, 3 << 13));
        return ok(NULL);
    }
    if (!strcmp(v, "setaffinity")) {
        cpu_set_t set; CPU_ZERO(&set); CPU_SET((int)num(b), &set);
        CHECK(syscall(SYS_sched_setaffinity, num(a), sizeof set, &set)); return ok(NULL);
    }
    if (!strcmp(v, "setscheduler")) {
        struct sched_param sp = {0};
        CHECK(syscall(SYS_sched_setscheduler, num(a), (int)num(b), &sp)); return ok(NULL);
    }
    if (!strcmp(v, "setparam")) {
        struct sched_param sp = {0};
        CHECK(syscall(SYS_sched_setparam, num(a), &sp)); return ok(NULL);
    }
    if (!strcmp(v, "setattr")) {
        /* struct sched_attr (48 bytes): size, policy, flags, nice, priority, runtime... */
        uint32_t attr[12] = {48, (uint32_t)num(b)};
        CHECK(syscall(SYS_sched_setattr, num(a), attr, 0)); return ok(NULL);
    }
    if (!strcmp(v, "ioprio")) {
        /* ioprio_set WHICH WHO: idle class (3 << 13) */
        CHECK(syscall(SYS_ioprio_set, num(a), num(b), 3 << 13)); return ok(NULL);
    }

    /* network */
    if (!strcmp(v, "tcp-connect")) {
        int s; CHECK(s = socket(AF_INET, SOCK_STREAM, argc > 3 ? (int)num(b) : 0));
        struct sockaddr_in addr = loopback((int)num(a));
        CHECK(connect(s, (struct sockaddr *)&addr, sizeof addr)); return ok(NULL);
    }
    if (!strcmp(v, "tcp-fastopen")) {
        /* TCP Fast Open: sendto(MSG_FASTOPEN) connects without calling connect() */
        int s; CHECK(s = socket(AF_INET, SOCK_STREAM, 0));
        struct sockaddr_in addr = loopback((int)num(a));
        CHECK(sendto(s, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&addr, sizeof addr)); return ok(NULL);
    }
    if (!strcmp(v, "tcp-listen")) {
        /* listen() on an unbound socket binds an ephemeral port without calling bind() */
        int s; CHECK(s = socket(AF_INET, SOCK_STREAM, 0));
        CHECK(listen(s, 1));
        struct sockaddr_in addr; socklen_t len = sizeof addr;
        CHECK(getsockname(s, (struct sockaddr *)&addr, &len));
        printf("ok %d\n", ntohs(addr.sin_port)); return 0;
    }
    if (!strcmp(v, "tcp-bind")) {
        int s; CHECK(s = socket(AF_INET, SOCK_STREAM, 0));
        struct sockaddr_in addr = loopback((int)num(a));
        CHECK(bind(s, (struct sockaddr *)&addr, sizeof addr));
        CHECK(listen(s, 1)); return ok(NULL);
    }
    if (!strcmp(v, "udp")) {
        int s; CHECK(s = socket(AF_INET, SOCK_DGRAM, 0));
        struct sockaddr_in addr = loopback((int)num(a));
        CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&addr, sizeof addr)); return ok(NULL);
    }
    if (!strcmp(v, "socket")) {
        /* raw syscall, full 64-bit arguments: the filter must judge what the kernel reads */
        CHECK(syscall(SYS_socket, num(a), num(b), argc > 4 ? num(argv[4]) : 0UL)); return ok(NULL);
    }
    if (!strcmp(v, "socketpair")) {
        int sv[2]; CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
        CHECK(write(sv[0], "x", 1)); return ok(NULL);
    }
    if (!strcmp(v, "dgram-pair-sendto")) {
        /* a datagram socketpair end, pointed at a pathname socket with sendto() */
        int sv[2]; CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv));
        struct sockaddr_un addr; socklen_t len = unix_addr(&addr, a, 0);
        CHECK(sendto(sv[0], "leak", 4, 0, (struct sockaddr *)&addr, len)); return ok(NULL);
    }
    if (!strcmp(v, "prlimit")) {
        /* lower RLIMIT_NOFILE of process `a` (0 = itself), raw syscall with a full 64-bit pid */
        struct rlimit64 { uint64_t cur, max; } lim = {64, 64};
        CHECK(syscall(SYS_prlimit64, num(a), 7 /* RLIMIT_NOFILE */, &lim, NULL)); return ok(NULL);
    }
    if (!strcmp(v, "unix-connect") || !strcmp(v, "abstract-connect")) {
        int s; CHECK(s = socket(AF_UNIX, SOCK_STREAM, 0));
        struct sockaddr_un addr; socklen_t len = unix_addr(&addr, a, v[0] == 'a');
        CHECK(connect(s, (struct sockaddr *)&addr, len)); return ok(NULL);
    }
    if (!strcmp(v, "abstract-self")) {
        int l, s; CHECK(l = socket(AF_UNIX, SOCK_STREAM, 0));
        struct sockaddr_un addr; socklen_t len = unix_addr(&addr, a, 1);
        CHECK(bind(l, (struct sockaddr *)&addr, len)); CHECK(listen(l, 1));
        CHECK(s = socket(AF_UNIX, SOCK_STREAM, 0));
        CHECK(connect(s, (struct sockaddr *)&addr, len)); return ok(NULL);
    }

    /* foreign entry points */
    if (!strcmp(v, "x32")) { CHECK(syscall(0x40000000 | SYS_getpid)); return ok(NULL); }
    if (!strcmp(v, "int80")) {
        long ret;
        /* i386 getpid (20) through the IA32 emulation entry, from a 64-bit process */
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
        if (ret < 0) { errno = (int)-ret; return fail(); }
        return ok(NULL);
    }
    if (!strcmp(v, "getpid")) { CHECK(syscall(SYS_getpid)); return ok(NULL); }

    /* fds, ttys */
    if (!strcmp(v, "fds")) {
        printf("ok");
        for (int fd = 0; fd < 65536; fd++)
            if (fcntl(fd, F_GETFD) >= 0) printf(" %d", fd);
        printf("\n"); return 0;
    }
    if (!strcmp(v, "fd-read")) {
        char c; CHECK(read((int)num(a), &c, 1)); return ok(NULL);
    }
    if (!strcmp(v, "tiocsti")) return tiocsti(argc > 2 ? num(a) : TIOCSTI);
    if (!strcmp(v, "tiocsetd")) {  /* the line discipline of the terminal on stdin (27: N_NULL) */
        int disc = (int)num(a); CHECK(ioctl(0, TIOCSETD, &disc)); return ok(NULL);
    }
    if (!strcmp(v, "tiocgwinsz")) {
        struct winsize w; CHECK(ioctl(0, TIOCGWINSZ, &w)); return ok(NULL);
    }
    fprintf(stderr, "probe: unknown verb %s\n", v);
    return 2;
}
