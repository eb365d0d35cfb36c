/*
 * sandboy.confine._native: run a cage plan in a fresh child and exec, without Python.
 *
 * Why this exists: a Python child after os.fork() pays for its interpreter (copy-on-write page
 * faults on every object it touches, ctypes argument conversion on every call): about 1 ms for
 * the ~50 system calls of a cage, against ~0.2 ms here. The POLICY is not here: `cage.py` turns
 * a policy into a plan — a list of raw system calls with integer or bytes arguments — and this
 * module only executes that list, in order, then execve()s. `_libc.py` executes the same plan in
 * Python where this module is not built; the probes in tests/cage run against both.
 *
 * Plan entry: (nr, flags, arg0, ..., arg5). `flags` bit 0 ("optional") means a failure is
 * ignored (e.g. PR_CAPBSET_DROP of a capability this kernel does not know); `flags >> 8`, when
 * not zero, is a slot (1..MAX_SLOTS) that keeps the call's result for later steps. A bytes
 * argument is passed as a pointer to its contents (the plan holds the objects alive); a 1-tuple
 * `(slot,)` stands for the result kept in that slot (an fd from open_tree or socket), and a
 * 3-tuple `(slot, template bytes, offset)` for a private copy of the bytes with that result
 * written at `offset` as a 32-bit int (an fd inside a struct: landlock_add_rule's). A failed
 * step keeps -1 in its slot, so an optional step using it fails too (EBADF). nr
 * NR_INIT is not a system call: the process forks, the parent becomes the init of its PID
 * namespace (become_init) and the child runs the rest of the plan; its arguments (fd0, fd1, fd2,
 * kinds) say what the init does with the caller's fd 0-2 (handoff_t). NR_SAME_FILE (fd, st_dev,
 * st_ino) is not one either: it fails with ESTALE unless `fd` is that file.
 *
 * The child only makes system calls and writes to a pipe: nothing that allocates or locks, so it
 * is safe after fork() in a multi-threaded parent, and in the caller's own memory: a namespace's
 * init is made with CLONE_VM (see `init_slot_t`), like the vfork'd child without namespaces.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 6
#define MAX_SLOTS 64
#define NR_INIT (-1)
#define REPORT_STATUS (-2)   /* errpipe record: (REPORT_STATUS, wait status of the command) */
#define NR_SAME_FILE (-3)    /* pseudo-call (fd, st_dev, st_ino): -ESTALE unless fd is that file */

/* The kernel's x86_64 rt_sigaction struct (not glibc's struct sigaction). */
struct kernel_sigaction {
    unsigned long handler;
    unsigned long flags;
    unsigned long restorer;
    unsigned long mask;
};

typedef struct {
    long nr;
    int optional;
    int save_slot;              /* 0: result not kept */
    unsigned from_slot;         /* bit a: args[a] is a slot number, not a value */
    long args[MAX_ARGS];
    char *owned[MAX_ARGS];      /* template copies (freed with the job) */
    int patch_slot[MAX_ARGS];   /* for a template: the slot written into it, and where */
    Py_ssize_t patch_offset[MAX_ARGS];
} step_t;

struct init_slot;

typedef struct {
    step_t *steps;
    Py_ssize_t nsteps;
    char **paths;   /* candidate executables, NULL-terminated */
    char **argv;
    char **envp;
    struct init_slot *slot;  /* the stacks of a namespace's init (fork_exec with clone_flags), else NULL */
} job_t;

/* A system call without libc's wrapper: the result, or -errno; errno is never written. A
   namespace's init shares the caller's memory (CLONE_VM) and with it the TLS of the thread that
   called fork_exec, so once that thread runs Python again the init must not write its errno. */
static inline long raw_call(long nr, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The memory a namespace's init runs on. The init is cloned with CLONE_VM: it shares the
   caller's memory instead of copying its page tables, which a fork does at every run and which
   grew with the caller (0.9 ms for a small Python process, 2.6 ms with 50 MB of heap, 12.6 ms
   with 200 MB, plus as much again to tear the copy down at the init's exit). Each init gets a
   slot of its own: its stack and the command's start stack (guard pages below each), and one
   word, `state`: SLOT_STARTED when fork_exec clones the init, SLOT_RELEASED once the init no
   longer reads the caller's plan (the command has exec'd, or the start failed), SLOT_FREE when
   the kernel clears it at the init's exit (CLONE_CHILD_CLEARTID; also at an exec of the init
   itself, a plan without NR_INIT). fork_exec sleeps on that word (a futex: every change wakes
   it, none can be missed) until it leaves SLOT_STARTED, then frees the plan and returns; the
   slot is reused only once it is SLOT_FREE. Slots are never unmapped (an init may outlive its
   caller's interest in it); a new one is mapped only when every slot is in use, so there are
   as many as runs ever overlapped. */
#define INIT_STACK_SIZE (64 * 1024)
#define COMMAND_STACK_SIZE (128 * 1024)
#define RELAY_BUFFER_SIZE (64 * 1024)  /* the init's copy of a relayed pipe (become_init) */
#define GUARD_SIZE 4096

enum { SLOT_FREE = 0, SLOT_STARTED = 1, SLOT_RELEASED = 2 };

typedef struct init_slot {
    int state;  /* the futex word: SLOT_*; atomics only */
    char *init_stack_top;
    char *command_stack_top;
    char *relay_buffer;  /* RELAY_BUFFER_SIZE bytes, this init's own (not on its stack) */
    struct init_slot *next;
} init_slot_t;

static init_slot_t *init_slots;  /* only touched with the GIL held */

static init_slot_t *acquire_init_slot(void) {
    for (init_slot_t *s = init_slots; s != NULL; s = s->next)
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SLOT_FREE) {
            __atomic_store_n(&s->state, SLOT_STARTED, __ATOMIC_RELAXED);
            return s;
        }
    size_t size = RELAY_BUFFER_SIZE + GUARD_SIZE + COMMAND_STACK_SIZE + GUARD_SIZE + INIT_STACK_SIZE;
    char *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    init_slot_t *s = PyMem_RawCalloc(1, sizeof(*s));
    char *stacks = base + RELAY_BUFFER_SIZE;
    if (s == NULL || mprotect(stacks, GUARD_SIZE, PROT_NONE) < 0 ||
        mprotect(stacks + GUARD_SIZE + COMMAND_STACK_SIZE, GUARD_SIZE, PROT_NONE) < 0) {
        munmap(base, size);
        PyMem_RawFree(s);
        return NULL;
    }
    s->relay_buffer = base;
    s->command_stack_top = stacks + GUARD_SIZE + COMMAND_STACK_SIZE;
    s->init_stack_top = base + size;
    s->state = SLOT_STARTED;
    s->next = init_slots;
    init_slots = s;
    return s;
}

/* In the init: the caller's plan is no longer needed; wake fork_exec. */
static void release_caller(init_slot_t *slot) {
    __atomic_store_n(&slot->state, SLOT_RELEASED, __ATOMIC_RELEASE);
    raw_call(SYS_futex, (long)&slot->state, FUTEX_WAKE, 1, 0, 0, 0);
}

static void free_strings(char **list) {
    if (list == NULL)
        return;
    PyMem_Free(list);
}

static void free_job(job_t *job) {
    for (Py_ssize_t i = 0; job->steps != NULL && i < job->nsteps; i++)
        for (int a = 0; a < MAX_ARGS; a++)
            PyMem_Free(job->steps[i].owned[a]);
    PyMem_Free(job->steps);
    free_strings(job->paths);
    free_strings(job->argv);
    free_strings(job->envp);
}

/* Only real lists and tuples: the char* pointers taken below point into their items, which the
   caller's object keeps alive. (PySequence_Fast of a generator would build a temporary list
   whose items die with it.) */
static PyObject *as_sequence(PyObject *seq, const char *what) {
    if (!PyList_Check(seq) && !PyTuple_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list or a tuple", what);
        return NULL;
    }
    return PySequence_Fast(seq, what);
}

/* A list of bytes -> NULL-terminated char* array pointing into the bytes objects. */
static char **to_strings(PyObject *seq, const char *what) {
    PyObject *fast = as_sequence(seq, what);
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    char **out = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(item) || strlen(PyBytes_AS_STRING(item)) != (size_t)PyBytes_GET_SIZE(item)) {
            PyErr_Format(PyExc_ValueError, "%s: item %zd is not bytes without NUL", what, i);
            PyMem_Free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = PyBytes_AS_STRING(item);
    }
    Py_DECREF(fast);  /* the caller's list keeps the bytes alive */
    return out;
}

static int to_arg(PyObject *obj, long *out, int *is_slot) {
    *is_slot = 0;
    if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 1) {
        long slot = PyLong_AsLong(PyTuple_GET_ITEM(obj, 0));
        if (slot == -1 && PyErr_Occurred())
            return -1;
        if (slot < 1 || slot > MAX_SLOTS) {
            PyErr_Format(PyExc_ValueError, "slot %ld out of range", slot);
            return -1;
        }
        *out = slot;
        *is_slot = 1;
        return 0;
    }
    if (PyBytes_Check(obj)) {
        *out = (long)(intptr_t)PyBytes_AS_STRING(obj);
        return 0;
    }
    if (obj == Py_None) {
        *out = 0;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLongMask(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (long)v;
    return 0;
}

static int to_steps(PyObject *plan, job_t *job) {
    PyObject *fast = as_sequence(plan, "plan");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    job->steps = PyMem_Calloc((size_t)n + 1, sizeof(step_t));
    job->nsteps = n;
    if (job->steps == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 2 || PyTuple_GET_SIZE(entry) > 2 + MAX_ARGS) {
            PyErr_Format(PyExc_ValueError, "plan step %zd: expected (nr, optional, *args)", i);
            Py_DECREF(fast);
            return -1;
        }
        step_t *s = &job->steps[i];
        s->nr = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
        if (s->nr == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        long flags = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));  /* True/False are ints */
        if (flags == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        s->optional = (int)(flags & 1);
        s->save_slot = (int)(flags >> 8);
        if (s->save_slot < 0 || s->save_slot > MAX_SLOTS) {
            PyErr_Format(PyExc_ValueError, "plan step %zd: slot out of range", i);
            Py_DECREF(fast);
            return -1;
        }
        for (Py_ssize_t a = 2; a < PyTuple_GET_SIZE(entry); a++) {
            int is_slot;
            PyObject *arg = PyTuple_GET_ITEM(entry, a);
            if (PyTuple_Check(arg) && PyTuple_GET_SIZE(arg) == 3) {  /* (slot, template, offset) */
                long slot = PyLong_AsLong(PyTuple_GET_ITEM(arg, 0));
                PyObject *tmpl = PyTuple_GET_ITEM(arg, 1);
                Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(arg, 2));
                if (PyErr_Occurred() || !PyBytes_Check(tmpl) || slot < 1 || slot > MAX_SLOTS || offset < 0 ||
                    offset + 4 > PyBytes_GET_SIZE(tmpl)) {
                    PyErr_Format(PyExc_ValueError, "plan step %zd: bad template argument", i);
                    Py_DECREF(fast);
                    return -1;
                }
                s->owned[a - 2] = PyMem_Malloc((size_t)PyBytes_GET_SIZE(tmpl));
                if (s->owned[a - 2] == NULL) {
                    PyErr_NoMemory();
                    Py_DECREF(fast);
                    return -1;
                }
                memcpy(s->owned[a - 2], PyBytes_AS_STRING(tmpl), (size_t)PyBytes_GET_SIZE(tmpl));
                s->args[a - 2] = (long)(intptr_t)s->owned[a - 2];
                s->patch_slot[a - 2] = (int)slot;
                s->patch_offset[a - 2] = offset;
                continue;
            }
            if (to_arg(arg, &s->args[a - 2], &is_slot) < 0) {
                Py_DECREF(fast);
                return -1;
            }
            if (is_slot)
                s->from_slot |= 1u << (a - 2);
        }
    }
    Py_DECREF(fast);
    return 0;
}

static int to_job(PyObject *plan, PyObject *paths, PyObject *argv, PyObject *envp, job_t *job) {
    memset(job, 0, sizeof(*job));
    if (to_steps(plan, job) < 0 || (job->paths = to_strings(paths, "paths")) == NULL ||
        (job->argv = to_strings(argv, "argv")) == NULL || (job->envp = to_strings(envp, "envp")) == NULL) {
        free_job(job);
        return -1;
    }
    return 0;
}

static void report(int fd, long index, long err);
static Py_ssize_t run_steps(const job_t *job, int errpipe, int may_init, Py_ssize_t start, long *slots, int *err);
static int exec_candidates(const job_t *job);

/* The confined child's work from plan step `start` on: run the steps, exec; on failure report
   (step index or -1 for exec, errno) on `errpipe` and exit 125 / 126 / 127. Never returns.
   Raw calls throughout, errors carried by value: this runs in the caller's memory and TLS
   (a vfork'd child, the init and the command it starts), where errno is the caller's. */
static void child_run(const job_t *job, int errpipe, int may_init, Py_ssize_t start, long *slots) {
    int step_err = 0;
    Py_ssize_t failed = run_steps(job, errpipe, may_init, start, slots, &step_err);
    if (failed >= 0) {
        report(errpipe, (long)failed, step_err);
        if (may_init && job->slot != NULL)
            release_caller(job->slot);  /* the init-to-be failed before starting the command */
        raw_call(SYS_exit_group, 125, 0, 0, 0, 0, 0);
    }
    int err = exec_candidates(job);
    report(errpipe, -1, err);
    if (may_init && job->slot != NULL)
        release_caller(job->slot);  /* the init-to-be itself could not exec (a plan without NR_INIT) */
    raw_call(SYS_exit_group, err == ENOENT || err == ENOTDIR ? 127 : 126, 0, 0, 0, 0, 0);
}

/* The command's start from the init: CLONE_VM | CLONE_VFORK, as vfork, so the caller's memory
   (which the init shares) is not copied (a page-table copy and its teardown per run); the
   init waits until the command has exec'd. The command runs on a stack of its own (it must
   not return into the init's frames), its init slot's, and goes on with the plan after
   NR_INIT, sharing the plan's slots. */
typedef struct {
    const job_t *job;
    int errpipe;
    Py_ssize_t start;
    long *slots;
} command_start_t;

static int command_main(void *arg) {
    const command_start_t *c = arg;
    child_run(c->job, c->errpipe, 0, c->start, c->slots);
    return 0;
}

/* Signals the init passes on to the command (as tini does); stop signals are not passed. */
/* END_RUN_SIGNAL (SIGRTMAX; _libc.END_RUN_SIGNAL): the supervision asks the init to end the run
   (a timeout, kill()): the init kills the command's tree itself, so its usual end follows —
   the relays drained into the caller's files, the offsets carried back, the status reported.
   Killing the init with the tree lost what was still in a relay's pipe. Only a kill(2) from
   outside the namespace counts: SI_USER with a pid that reads 0 in here. The code matters: a
   sigqueue (rt_sigqueueinfo, pidfd_send_signal with an info) carries whatever si_pid its
   sender wrote, but the kernel refuses one that claims SI_USER for another process, so the
   command cannot end its own run this way (where Landlock does not scope signals, ABI < 6).
   A real-time signal: queued with its sender, never merged or delivered without it. */
#define END_RUN_SIGNAL 64
static const int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH, SIGCONT};

static void forwarding_set(sigset_t *set) {
    sigemptyset(set);
    for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(forwarded_signals[0]); i++)
        sigaddset(set, forwarded_signals[i]);
    sigaddset(set, SIGCHLD);
}

/* What the init does with the caller's fd 0-2 (namespaces.StdioHandoff; NR_INIT's arguments
   fd0, fd1, fd2, kinds): 2 bits of `kinds` per fd. CARRY_OFFSET: fd[k] is the file the caller
   handed in on fd k, reopened on the cage's read-only tree; when the command's tree has ended
   the caller's offset is set from it. RELAY: fd[k] is the read end of the pipe the command
   writes to instead of the caller's fd k; the init copies it there while the command runs and
   drains it once the tree has ended. */
#define CARRY_OFFSET 1
#define RELAY 2
#define DRAIN_LIMIT (16L << 20)  /* after the tree ended: more than any pipe of the command holds */

typedef struct {
    long kinds;
    int fd[3];
    char *buffer;  /* the init slot's relay buffer */
} handoff_t;

static int kind_of(const handoff_t *h, int k) { return (int)(h->kinds >> (2 * k)) & 3; }

static int write_all(int fd, const char *buf, long n) {
    while (n > 0) {
        long w = raw_call(SYS_write, fd, (long)buf, n, 0, 0, 0);
        if (w == -EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        n -= w;
    }
    return 0;
}

/* One read of relay k's pipe, copied to the caller's fd k: the bytes copied, 0 when the pipe
   is empty (non-blocking), -1 when this relay is over: end of file (every writer closed it),
   or the caller's file refused a write (ENOSPC, EFBIG, EIO): the pipe is closed then, so the
   command's next write fails (EPIPE) as a write of its own to that file would have. */
static long relay_once(handoff_t *h, int k) {
    long n = raw_call(SYS_read, h->fd[k], (long)h->buffer, RELAY_BUFFER_SIZE, 0, 0, 0);
    if (n == -EAGAIN || n == -EINTR)
        return 0;
    if (n > 0 && write_all(k, h->buffer, n) == 0)
        return n;
    raw_call(SYS_close, h->fd[k], 0, 0, 0, 0, 0);
    h->fd[k] = -1;
    return -1;
}

/* Close every fd but those in keep[0..n) (n <= 8). */
static void close_all_but(int *keep, int n) {
    for (int i = 1; i < n; i++)  /* insertion sort: a handful */
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    long from = 0;
    for (int i = 0; i < n; i++) {
        if (keep[i] < from)
            continue;  /* a duplicate */
        if (keep[i] > from)
            raw_call(SYS_close_range, from, keep[i] - 1, 0, 0, 0, 0);
        from = keep[i] + 1;
    }
    raw_call(SYS_close_range, from, ~0U, 0, 0, 0, 0);
}

/* The command has exited with `status`: with a handoff, end what is left of its tree first
   (the init's exit would kill it anyway), so no writer of a relay's pipe and no reader of a
   reopened file is left; drain each relay, carry each offset back; then report and exit. */
static void end_run(handoff_t *h, int errpipe, int status) {
    if (h->kinds) {
        raw_call(SYS_kill, -1, SIGKILL, 0, 0, 0, 0);  /* every process of the namespace but the init */
        for (;;) {
            long r = raw_call(SYS_wait4, -1, 0, __WALL, 0, 0, 0);
            if (r < 0 && r != -EINTR)
                break;  /* ECHILD: none left */
        }
        for (int k = 0; k < 3; k++) {
            if (kind_of(h, k) == RELAY && h->fd[k] >= 0) {
                /* non-blocking: a copy of the write end sent out of the namespace (SCM_RIGHTS)
                   must not keep the run from ending */
                raw_call(SYS_fcntl, h->fd[k], F_SETFL, O_NONBLOCK, 0, 0, 0);
                for (long drained = 0; drained < DRAIN_LIMIT;) {
                    long n = relay_once(h, k);
                    if (n <= 0)
                        break;
                    drained += n;
                }
            } else if (kind_of(h, k) == CARRY_OFFSET) {
                long offset = raw_call(SYS_lseek, h->fd[k], 0, SEEK_CUR, 0, 0, 0);
                if (offset >= 0)
                    raw_call(SYS_lseek, k, offset, SEEK_SET, 0, 0, 0);
            }
        }
    }
    report(errpipe, REPORT_STATUS, status);
    raw_call(SYS_exit_group, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), 0, 0, 0, 0, 0);
}

/* The init of a new PID namespace: fork; the child returns 0 and runs the rest of the plan;
   this process passes signals on to it (when it left the init's process group, which is what
   every sender signals), reaps every orphan of the namespace, relays the pipes of `args`
   (NR_INIT's arguments, see handoff_t), and when the command exits reports its wait status on
   `errpipe` and exits with its code (pid 1 cannot die of its own signal). Its exit makes the
   kernel kill whatever is left in the namespace. Only system calls: this runs in a child of a
   possibly multi-threaded Python process, in that process's memory (CLONE_VM, see
   `init_slot_t`): once the command has started (the caller runs Python again) only raw calls,
   which write no errno, and nothing of the plan is read. */
static long become_init(const job_t *job, int errpipe, Py_ssize_t next, long *slots, const long *args) {
    if (job->slot == NULL)
        return -EINVAL;  /* an init needs its slot's stacks (fork_exec with clone_flags) */
    if (raw_call(SYS_getpid, 0, 0, 0, 0, 0, 0) != 1)
        return -EINVAL;  /* only pid 1 of a new PID namespace: end_run's kill(-1) must never reach the host's */
    handoff_t h = {args[3] & 0x3f, {(int)args[0], (int)args[1], (int)args[2]}, job->slot->relay_buffer};
    int relaying = 0;
    for (int k = 0; k < 3; k++)
        relaying |= kind_of(&h, k) == RELAY;
    /* SIGCHLD back to SIG_DFL: an ignored SIGCHLD (SIG_IGN survives exec, so a caller started
       with it has it, and neither CLONE_CLEAR_SIGHAND nor default_caught_signals touches an
       ignored signal) makes the kernel reap the init's children itself, and the wait4 below
       would never see the command exit: the run hung for ever, the init left behind. */
    struct kernel_sigaction dfl = {0};
    raw_call(SYS_rt_sigaction, SIGCHLD, (long)&dfl, 0, 8, 0, 0);
    sigset_t set;
    forwarding_set(&set);
    sigaddset(&set, END_RUN_SIGNAL);
    raw_call(SYS_rt_sigprocmask, SIG_BLOCK, (long)&set, 0, 8, 0, 0);  /* the command unblocks in its plan */
    /* With a relay the init waits for its pipes and its signals at once: the signals through a
       signalfd (made before the command: a failure is this step's) */
    long sfd = -1;
    if (relaying) {
        sfd = raw_call(SYS_signalfd4, -1, (long)&set, 8, SFD_CLOEXEC, 0, 0);
        if (sfd < 0)
            return sfd;
    }
    command_start_t start = {job, errpipe, next, slots};
    long child = clone(command_main, job->slot->command_stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
    if (child < 0)
        return -errno;  /* libc's clone wrapper: read at once (the caller waits on a raw futex) */
    /* The command has exec'd or exited (CLONE_VFORK): from here on nothing of the caller's. */
    release_caller(job->slot);
    /* Keep nothing of the caller's but the error pipe and what the handoff needs: the
       command's stdio and the launcher's fds must not stay open in here. */
    int keep[8] = {errpipe}, nkeep = 1;
    if (sfd >= 0)
        keep[nkeep++] = (int)sfd;
    for (int k = 0; k < 3; k++)
        if (kind_of(&h, k)) {
            keep[nkeep++] = k;
            keep[nkeep++] = h.fd[k];
        }
    close_all_but(keep, nkeep);
    for (;;) {
        long sig;
        unsigned int sender;  /* the sender's pid in this namespace: 0 from outside it */
        int code;             /* SI_USER for a kill(2); a sigqueue's pid is its sender's word */
        if (relaying) {
            struct pollfd polled[4] = {{(int)sfd, POLLIN, 0}};
            int relayed[4], n = 1;
            for (int k = 0; k < 3; k++)
                if (kind_of(&h, k) == RELAY && h.fd[k] >= 0) {
                    relayed[n] = k;
                    polled[n++] = (struct pollfd){h.fd[k], POLLIN, 0};
                }
            if (raw_call(SYS_poll, (long)polled, n, -1, 0, 0, 0) < 0)
                continue;
            for (int i = 1; i < n; i++)
                if (polled[i].revents)
                    relay_once(&h, relayed[i]);
            struct signalfd_siginfo info;
            if (!(polled[0].revents & POLLIN) ||
                raw_call(SYS_read, sfd, (long)&info, sizeof(info), 0, 0, 0) != (long)sizeof(info))
                continue;
            sig = info.ssi_signo;
            sender = info.ssi_pid;
            code = info.ssi_code;
        } else {
            siginfo_t info;
            sig = raw_call(SYS_rt_sigtimedwait, (long)&set, (long)&info, 0, 8, 0, 0);
            if (sig < 0)
                continue;
            sender = (unsigned int)info.si_pid;
            code = info.si_code;
        }
        if (sig == END_RUN_SIGNAL) {
            if (sender == 0 && code == SI_USER)
                raw_call(SYS_kill, -1, SIGKILL, 0, 0, 0, 0);  /* the tree; SIGCHLD then ends the run */
            continue;
        }
        if (sig != SIGCHLD) {
            /* Senders signal the init's process group (the command is in it unless it made
               its own); pass a signal on only to a command that left the group. */
            long group = raw_call(SYS_getpgid, child, 0, 0, 0, 0, 0);
            if (group >= 0 && group != raw_call(SYS_getpgid, 0, 0, 0, 0, 0, 0))
                raw_call(SYS_kill, child, sig, 0, 0, 0, 0);
            continue;
        }
        int status;
        long pid;
        while ((pid = raw_call(SYS_wait4, -1, (long)&status, WNOHANG, 0, 0, 0)) > 0)
            if (pid == child)
                end_run(&h, errpipe, status);
    }
}

/* Runs steps `start`.. with `slots` (NULL: fresh ones). Returns -1 on success, else the index
   of the step that failed (its error in *err). An NR_INIT step never returns in this process (it
   becomes the init; the command goes on in `command_main`). `may_init` is false outside a
   clone of the caller (apply_plan, a vfork'd child, the command itself): no init there. */
static Py_ssize_t run_steps(const job_t *job, int errpipe, int may_init, Py_ssize_t start, long *slots, int *err) {
    long own[MAX_SLOTS + 1] = {0};
    if (slots == NULL)
        slots = own;
    for (Py_ssize_t i = start; i < job->nsteps; i++) {
        const step_t *s = &job->steps[i];
        long r;
        long a[MAX_ARGS];
        for (int k = 0; k < MAX_ARGS; k++) {
            a[k] = (s->from_slot & (1u << k)) ? slots[s->args[k]] : s->args[k];
            if (s->patch_slot[k]) {
                int value = (int)slots[s->patch_slot[k]];
                memcpy(s->owned[k] + s->patch_offset[k], &value, sizeof(value));
            }
        }
        if (s->nr == NR_INIT) {
            if (!may_init || errpipe < 0) {
                *err = EINVAL;  /* only a clone of the caller may become an init */
                return i;
            }
            r = become_init(job, errpipe, i + 1, slots, a);  /* returns only if it could not start the command */
        } else if (s->nr == NR_SAME_FILE) {
            struct stat st;
            r = raw_call(SYS_fstat, a[0], (long)&st, 0, 0, 0, 0);
            if (r == 0 && ((unsigned long)st.st_dev != (unsigned long)a[1] || (unsigned long)st.st_ino != (unsigned long)a[2]))
                r = -ESTALE;
        } else {
            r = raw_call(s->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
        }
        /* raw results: -4095..-1 is -errno (an fd or a pointer-sized result is never in it) */
        int failed = r < 0 && r >= -4095;
        if (s->save_slot)
            slots[s->save_slot] = failed ? -1 : r;
        if (failed && !s->optional) {
            *err = (int)-r;
            return i;
        }
    }
    return -1;
}

/* As execvp(3): try each candidate; a refused or missing one is skipped; EACCES wins. */
static int exec_candidates(const job_t *job) {
    int saved = ENOENT;
    for (char **p = job->paths; *p != NULL; p++) {
        int err = (int)-raw_call(SYS_execve, (long)*p, (long)job->argv, (long)job->envp, 0, 0, 0);
        if (err != ENOENT && err != ENOTDIR && err != EACCES && err != ESTALE)
            return err;
        if (saved != EACCES)
            saved = err;
    }
    return saved;
}

static void report(int fd, long index, long err) {
    long msg[2] = {index, err};
    long done = 0;
    while (done < (long)sizeof(msg)) {
        long w = raw_call(SYS_write, fd, (long)((char *)msg + done), (long)sizeof(msg) - done, 0, 0, 0);
        if (w == -EINTR)
            continue;
        if (w <= 0)
            return;
        done += w;
    }
}

PyDoc_STRVAR(fork_exec_doc,
"fork_exec(plan, paths, argv, envp, errpipe, clone_flags=0) -> pid\n\n"
"Fork; in the child run the plan, then execve the first candidate of `paths` that works.\n"
"On failure the child writes (step index or -1 for exec, errno) as two native longs to\n"
"`errpipe` and exits 125 (a step failed) or 126/127 (exec failed). With `clone_flags`\n"
"(CLONE_NEW* namespaces) the child is made by clone(2) with them, and an NR_INIT step in\n"
"the plan later writes (-2, the command's wait status) when the command exits.");

/* Put every caught signal back to SIG_DFL in a fresh child (the caller's handlers are Python's,
   which must not run there), before its plan unblocks signals. */
static void default_caught_signals(void) {
    for (int sig = 1; sig < 65; sig++) {
        struct kernel_sigaction current, dfl = {0};
        if (raw_call(SYS_rt_sigaction, sig, 0, (long)&current, 8, 0, 0) == 0 &&
            current.handler != (unsigned long)SIG_DFL && current.handler != (unsigned long)SIG_IGN)
            raw_call(SYS_rt_sigaction, sig, (long)&dfl, 0, 8, 0, 0);
    }
}

/* The init-to-be (fork_exec with clone_flags), on its slot's stack in the caller's memory;
   `arg` is fork_exec's, alive until the init releases it. `handlers_cleared`: made by clone3
   with CLONE_CLEAR_SIGHAND, so the kernel already put every caught signal back to SIG_DFL. */
typedef struct {
    const job_t *job;
    int errpipe;
    int handlers_cleared;
} init_start_t;

static int init_main(void *arg) {
    const init_start_t *start = arg;
    if (!start->handlers_cleared)
        default_caught_signals();
    child_run(start->job, start->errpipe, 1, 0, NULL);
    return 0;
}

/* clone3(2) with the child running fn(arg) on the stack `args` names, as glibc's clone() does
   for clone(2) (glibc has no clone3 wrapper). Why: CLONE_CLEAR_SIGHAND (Linux 5.5) resets the
   caught signals in the kernel, where default_caught_signals() makes 64 rt_sigaction calls
   (≈ 26 µs of every run under the tier). Raw, x86_64 only like raw_call: the parent gets the
   child's pid or -errno (errno is not written); the child calls fn on the new stack (16-byte
   aligned: the top of a slot's stack is page-aligned) and exits with its result. */
static long clone3_with(struct clone_args *args, int (*fn)(void *), void *arg) {
    long ret;
    register long r12 __asm__("r12") = (long)fn;
    register long r13 __asm__("r13") = (long)arg;
    __asm__ volatile("syscall\n\t"
                     "test %%rax, %%rax\n\t"
                     "jnz 1f\n\t"
                     "xor %%ebp, %%ebp\n\t" /* the child: the outermost frame of its stack */
                     "mov %%r13, %%rdi\n\t"
                     "call *%%r12\n\t"
                     "mov %%eax, %%edi\n\t"
                     "mov %[nr_exit], %%eax\n\t"
                     "syscall\n\t"
                     "hlt\n"
                     "1:\n\t"
                     : "=a"(ret)
                     : "a"((long)SYS_clone3), "D"(args), "S"(sizeof(*args)), "r"(r12), "r"(r13),
                       [nr_exit] "i"(SYS_exit)
                     : "rcx", "r11", "memory");
    return ret;
}

static PyObject *fork_exec(PyObject *self, PyObject *args) {
    PyObject *plan, *paths, *argv, *envp;
    int errpipe;
    unsigned long clone_flags = 0;
    if (!PyArg_ParseTuple(args, "OOOOi|k:fork_exec", &plan, &paths, &argv, &envp, &errpipe, &clone_flags))
        return NULL;
    job_t job;
    if (to_job(plan, paths, argv, envp, &job) < 0)
        return NULL;
    if (clone_flags) {
        job.slot = acquire_init_slot();
        if (job.slot == NULL) {
            free_job(&job);
            return PyErr_NoMemory();
        }
    }
    /* Without namespaces: vfork, as CPython's _posixsubprocess does: no copy of the parent's
       page tables (the larger the Python process, the more that saves). With them: clone with
       CLONE_VM on the init slot's stack (see `init_slot_t`), for the same reason. Either child
       shares the parent's memory, so it must not run the parent's signal handlers: every
       signal is blocked around the clone, and the child puts caught signals back to SIG_DFL
       before its plan unblocks them. The child only makes system calls and never returns from
       this function. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t pid;
    int fork_errno = 0;
    if (clone_flags) {
        init_start_t start = {&job, errpipe, 1};
        struct clone_args args;
        memset(&args, 0, sizeof(args));
        args.flags = clone_flags | CLONE_VM | CLONE_CHILD_CLEARTID | CLONE_CLEAR_SIGHAND;
        args.child_tid = (unsigned long)&job.slot->state;
        args.exit_signal = SIGCHLD;
        args.stack = (unsigned long)(job.slot->init_stack_top - INIT_STACK_SIZE);
        args.stack_size = INIT_STACK_SIZE;
        long r = clone3_with(&args, init_main, &start);
        if (r == -ENOSYS || r == -EINVAL || r == -EPERM) {
            /* no clone3 here (a container's seccomp refuses it, as Docker's ENOSYS does), or no
               CLONE_CLEAR_SIGHAND: clone(2), and the init resets its handlers itself */
            start.handlers_cleared = 0;
            pid = clone(init_main, job.slot->init_stack_top,
                        (int)(clone_flags | CLONE_VM | CLONE_CHILD_CLEARTID | SIGCHLD), &start, NULL, NULL,
                        &job.slot->state);
            fork_errno = errno;
        } else {
            pid = r < 0 ? -1 : (pid_t)r;
            fork_errno = r < 0 ? (int)-r : 0;
        }
        if (pid < 0) {
            __atomic_store_n(&job.slot->state, SLOT_FREE, __ATOMIC_RELEASE);
        } else {
            /* The init reads the plan (and the command, its vfork child, too) until the command
               has exec'd: wait for that (or for the init's end) before freeing it. Raw calls
               only: the init writes this thread's errno meanwhile. */
            Py_BEGIN_ALLOW_THREADS
            while (__atomic_load_n(&job.slot->state, __ATOMIC_ACQUIRE) == SLOT_STARTED)
                raw_call(SYS_futex, (long)&job.slot->state, FUTEX_WAIT, SLOT_STARTED, 0, 0, 0);
            Py_END_ALLOW_THREADS
        }
    } else {
        pid = vfork();
        if (pid == 0) {
            default_caught_signals();
            child_run(&job, errpipe, 0, 0, NULL);  /* a vfork'd child may not become an init */
        }
        fork_errno = errno;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free_job(&job);
    if (pid < 0) {
        errno = fork_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(pid);
}

PyDoc_STRVAR(apply_plan_doc,
"apply_plan(plan)\n\n"
"Run the plan in THIS process (exec mode of the CLI). On failure raises\n"
"OSError(errno, strerror, index of the failed step).");

static PyObject *apply_plan(PyObject *self, PyObject *plan) {
    job_t job;
    memset(&job, 0, sizeof(job));
    if (to_steps(plan, &job) < 0) {
        free_job(&job);
        return NULL;
    }
    int err = 0;
    Py_ssize_t failed = run_steps(&job, -1, 0, 0, NULL, &err);
    free_job(&job);
    if (failed >= 0) {
        PyObject *exc = Py_BuildValue("(isn)", err, strerror(err), failed);
        if (exc != NULL) {
            PyErr_SetObject(PyExc_OSError, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(exec_first_doc,
"exec_first(paths, argv, envp)\n\n"
"execve the first candidate of `paths` that works (as execvp(3) walks PATH). Returns only on\n"
"failure, raising OSError(errno, strerror).");

static PyObject *exec_first(PyObject *self, PyObject *args) {
    PyObject *paths, *argv, *envp;
    if (!PyArg_ParseTuple(args, "OOO:exec_first", &paths, &argv, &envp))
        return NULL;
    job_t job;
    PyObject *no_steps = PyTuple_New(0);
    if (no_steps == NULL)
        return NULL;
    int rc = to_job(no_steps, paths, argv, envp, &job);
    Py_DECREF(no_steps);
    if (rc < 0)
        return NULL;
    errno = exec_candidates(&job);
    free_job(&job);
    return PyErr_SetFromErrno(PyExc_OSError);
}

PyDoc_STRVAR(raw_syscall_doc,
"syscall(nr, *args) -> int\n\nA raw system call; int, bytes (pointer) or None (NULL) arguments. Raises OSError.");

static PyObject *raw_syscall(PyObject *self, PyObject *args) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 1 || n > 1 + MAX_ARGS) {
        PyErr_SetString(PyExc_TypeError, "syscall(nr, *args) takes 1 to 7 arguments");
        return NULL;
    }
    long nr = PyLong_AsLong(PyTuple_GET_ITEM(args, 0));
    if (nr == -1 && PyErr_Occurred())
        return NULL;
    long a[MAX_ARGS] = {0};
    int is_slot;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (to_arg(PyTuple_GET_ITEM(args, i), &a[i - 1], &is_slot) < 0)
            return NULL;
        if (is_slot) {
            PyErr_SetString(PyExc_TypeError, "syscall(): slots exist only in plans");
            return NULL;
        }
    }
    long r = syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    if (r < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(r);
}

PyDoc_STRVAR(address_of_doc,
"address_of(data: bytes) -> int\n\nThe address of a bytes object's contents, for structs that point at other\n"
"buffers (seccomp's sock_fprog). Valid while the object lives.");

static PyObject *address_of(PyObject *self, PyObject *obj) {
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "address_of() takes bytes");
        return NULL;
    }
    return PyLong_FromVoidPtr(PyBytes_AS_STRING(obj));
}

PyDoc_STRVAR(wait_forwarding_doc,
"wait_forwarding(pid, seconds=0) -> wait status\n\n"
"Wait for the child `pid`, passing on to its process group the signals an init forwards\n"
"(HUP, INT, QUIT, TERM, USR1, USR2, ALRM, WINCH, CONT), without running Python until it has\n"
"exited. `seconds` > 0: a deadline (CLOCK_MONOTONIC, from now); once it passes the child (a\n"
"namespace's init) is asked to end the run (END_RUN_SIGNAL: it kills the command's tree, drains\n"
"its relays, carries offsets back, reports), given END_GRACE_MS, then killed (SIGKILL: the\n"
"whole PID namespace with it); its wait status comes back with DEADLINE_PASSED (bit 16, above\n"
"any real wait status) set.");

#define DEADLINE_PASSED (1 << 16)  /* _libc.DEADLINE_PASSED */
#define END_GRACE_MS 1000          /* supervision.END_GRACE_SECONDS */

static PyObject *wait_forwarding(PyObject *self, PyObject *args) {
    long child;
    double seconds = 0;
    if (!PyArg_ParseTuple(args, "l|d:wait_forwarding", &child, &seconds))
        return NULL;
    sigset_t set, old;
    forwarding_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    int status = 0;
    long got = 0;
    int err = 0;
    int passed = 0;
    struct timespec end = {0, 0};
    if (seconds > 0) {
        /* (a deadline of years: held as it is, never reached; no overflow of tv_sec for the
           policy's bound, limits.wall_seconds <= 2^31) */
        clock_gettime(CLOCK_MONOTONIC, &end);
        end.tv_sec += (time_t)seconds;
        end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
        if (end.tv_nsec >= 1000000000L) {
            end.tv_sec++;
            end.tv_nsec -= 1000000000L;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (long sig = SIGCHLD;;) {  /* checks once first: the child may have exited already */
        if (sig > 0 && sig != SIGCHLD) {
            /* to the child's process group (a namespace's init and its command share one) */
            if (syscall(SYS_kill, -child, sig) < 0)
                syscall(SYS_kill, child, sig);
        } else {
            got = syscall(SYS_wait4, child, &status, WNOHANG, NULL);
            if (got < 0) {
                err = errno;
                break;
            }
            if (got == child)
                break;
        }
        siginfo_t info;
        struct timespec left, *timeout = NULL;
        if (seconds > 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            left.tv_sec = end.tv_sec - now.tv_sec;
            left.tv_nsec = end.tv_nsec - now.tv_nsec;
            if (left.tv_nsec < 0) {
                left.tv_sec--;
                left.tv_nsec += 1000000000L;
            }
            if (left.tv_sec < 0 && !passed) {
                /* The deadline: the child is unreaped, so its pid is still its own. The init
                   ends the run as a supervision's timeout has it (what is in a relay's pipe
                   reaches the caller's file); after the grace, SIGKILL. */
                passed = DEADLINE_PASSED;
                syscall(SYS_kill, child, END_RUN_SIGNAL);
                end.tv_sec += END_GRACE_MS / 1000;
                sig = 0;
                continue;
            }
            if (left.tv_sec < 0) {
                /* Then a blocking wait (the signals stay held: nothing is left to pass them to). */
                syscall(SYS_kill, child, SIGKILL);
                do
                    got = syscall(SYS_wait4, child, &status, 0, NULL);
                while (got < 0 && errno == EINTR);
                if (got < 0)
                    err = errno;
                break;
            }
            timeout = &left;
        }
        sig = syscall(SYS_rt_sigtimedwait, &set, &info, timeout, 8);  /* -1 (EAGAIN): time to look */
    }
    Py_END_ALLOW_THREADS
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (got < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(status | passed);
}

PyDoc_STRVAR(add_path_rules_doc,
"add_path_rules(ruleset_fd, rules, handled_fs, file_rights) -> [(index, errno), ...]\n\n"
"`ruleset.build_ruleset`'s loop over the path rules, each as `ruleset._add_path_rule` makes it:\n"
"the path (str) opened O_PATH with openat2's RESOLVE_NO_SYMLINKS (no symlink followed on the\n"
"way, the last component opened as itself), fstat'ed, its rights (& handled_fs) cut to\n"
"file_rights for a non-directory, added where any are left, closed. The rules not added come\n"
"back: (index, errno) where the open failed (the caller warns, or opens the path its other way\n"
"where openat2 itself is refused: ENOSYS, EPERM), (index, -1) where the path is a symlink now.\n"
"A rule the kernel refuses raises OSError, as the syscall would.");

/* landlock_path_beneath_attr { u64 allowed_access; s32 parent_fd; } __attribute__((packed)) */
struct path_beneath_attr {
    unsigned long long allowed_access;
    int parent_fd;
} __attribute__((packed));

struct rule_open_how {  /* struct open_how (linux/openat2.h) */
    unsigned long long flags, mode, resolve;
};

#define RULE_PATH_BENEATH 1
#define OPEN_RESOLVE_NO_SYMLINKS 0x04

/* (index, err) appended to `skipped`; -1 on a Python error */
static int skipped_rule(PyObject *skipped, Py_ssize_t index, long err) {
    PyObject *item = Py_BuildValue("(nl)", index, err);
    if (item == NULL)
        return -1;
    int r = PyList_Append(skipped, item);
    Py_DECREF(item);
    return r;
}

static PyObject *add_path_rules(PyObject *self, PyObject *args) {
    int ruleset_fd;
    PyObject *rules;
    unsigned long long handled_fs, file_rights;
    if (!PyArg_ParseTuple(args, "iOKK:add_path_rules", &ruleset_fd, &rules, &handled_fs, &file_rights))
        return NULL;
    PyObject *seq = PySequence_Fast(rules, "add_path_rules(): rules must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *skipped = PyList_New(0);
    if (skipped == NULL)
        goto fail;
    struct rule_open_how how = {O_PATH | O_NOFOLLOW | O_CLOEXEC, 0, OPEN_RESOLVE_NO_SYMLINKS};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rule = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(rule) || PyTuple_GET_SIZE(rule) != 2) {
            PyErr_SetString(PyExc_TypeError, "add_path_rules(): a rule is (path, rights)");
            goto fail;
        }
        PyObject *encoded;
        if (!PyUnicode_FSConverter(PyTuple_GET_ITEM(rule, 0), &encoded))
            goto fail;
        unsigned long long rights = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(rule, 1));
        if (rights == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(encoded);
            goto fail;
        }
        rights &= handled_fs;
        long fd = syscall(SYS_openat2, AT_FDCWD, PyBytes_AS_STRING(encoded), &how, sizeof how);
        Py_DECREF(encoded);
        if (fd < 0) {
            if (skipped_rule(skipped, i, errno) < 0)
                goto fail;
            continue;
        }
        struct stat st;
        long err = 0;
        if (fstat((int)fd, &st) < 0) {  /* (never expected of an O_PATH fd: raised, as os.fstat's) */
            int saved = errno;
            close((int)fd);
            errno = saved;
            PyErr_SetFromErrno(PyExc_OSError);
            goto fail;
        }
        if (S_ISLNK(st.st_mode)) {
            err = -1;     /* the rule path became a symlink since it was checked */
        } else {
            if (!S_ISDIR(st.st_mode))
                rights &= file_rights;  /* directory-only rights on a file are EINVAL */
            if (rights) {
                struct path_beneath_attr attr = {rights, (int)fd};
                if (syscall(SYS_landlock_add_rule, ruleset_fd, RULE_PATH_BENEATH, &attr, 0) < 0) {
                    int saved = errno;
                    close((int)fd);
                    errno = saved;
                    PyErr_SetFromErrno(PyExc_OSError);
                    goto fail;
                }
            }
        }
        close((int)fd);
        if (err != 0 && skipped_rule(skipped, i, err) < 0)
            goto fail;
    }
    Py_DECREF(seq);
    return skipped;
fail:
    Py_DECREF(seq);
    Py_XDECREF(skipped);
    return NULL;
}

static PyMethodDef methods[] = {
    {"add_path_rules", add_path_rules, METH_VARARGS, add_path_rules_doc},
    {"wait_forwarding", wait_forwarding, METH_VARARGS, wait_forwarding_doc},
    {"fork_exec", fork_exec, METH_VARARGS, fork_exec_doc},
    {"apply_plan", apply_plan, METH_O, apply_plan_doc},
    {"exec_first", exec_first, METH_VARARGS, exec_first_doc},
    {"syscall", raw_syscall, METH_VARARGS, raw_syscall_doc},
    {"address_of", address_of, METH_O, address_of_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Run Sandboy cage plans without Python in the child.", -1, methods,
};

/* SOURCE_SIZE: the size of this file when it was built (setup.py). `_libc` uses no build whose
   source has changed since: a checkout moved on without `make compile` ran the plans of today
   with the executor of yesterday (session 10: an init built before END_RUN_SIGNAL never blocked
   it, and every timed-out run waited the whole grace). -1 where the build did not say. */
#ifndef NATIVE_SOURCE_SIZE
#define NATIVE_SOURCE_SIZE -1
#endif

int sandboy_walk_add(PyObject *module);  /* _native_walk.c: the git check's walk (ADR 0019 session 13) */
int sandboy_mac_add(PyObject *module);   /* _native_mac.c: the cache's seal (ADR 0030) */

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddIntConstant(m, "SOURCE_SIZE", NATIVE_SOURCE_SIZE) < 0 || sandboy_walk_add(m) < 0
                      || sandboy_mac_add(m) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
