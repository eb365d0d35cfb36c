/* The git check's walk of a write root in C (ADR 0019 "Session 13"): `gitcheck._Walk.scan`, the
 * same decisions as its Python stand-in (`_Walk._scan_python`, used with SANDBOY_NATIVE=0 and where
 * this module was not built), made without a Python object per directory.
 *
 * walk_scan(root, left, census, prior, listings, since, tracked, cut, gathered, exclude)
 *     -> (left, events)
 *
 * It goes through `root` as the stand-in does — the same stack, the same order, the same budget —
 * and records in `listings` (at launch) or `gathered` (after the run, the walk index's entries)
 * what the stand-in records there, built of the same objects. What the walk must do in a
 * directory beyond listing it is returned as `events`, in the order the stand-in meets them, for
 * the caller to do in that order (`_Walk.walk`): (0, directory) a `.git` is there, (1, directory)
 * a `HEAD` is there, (2, directory, errno) it could not be listed. Nothing here judges anything.
 *
 * real_path(path) -> str
 *
 * realpath(3) of a str path, or OSError: what `gitcheck.real_path` asks before `os.path.realpath`,
 * whose lstat (and readlink) per component in Python cost a write-root hit ≈ 20 µs a path, seven
 * paths a README-example hit (session 14). Where it fails (a missing component, a loop, a path
 * too long) the caller takes `os.path.realpath`'s answer, so every answer is that function's:
 * where realpath(3) succeeds both resolve the same existing path the kernel's way.
 *
 * Compiled into `sandboy.confine._native` (setup.py); `WALK_SOURCE_SIZE` is this file's size
 * then, so a build older than the source beside it is not used (`gitcheck._native_scan`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *path;       /* malloc'ed, NUL-terminated file system bytes */
    size_t length;
    struct stat st;
} pending_t;

typedef struct {
    pending_t *items;
    size_t count, capacity;
} stack_t_;

static int push(stack_t_ *stack, const char *prefix, size_t prefix_length, const char *name, size_t name_length,
                const struct stat *st) {
    if (stack->count == stack->capacity) {
        size_t capacity = stack->capacity ? stack->capacity * 2 : 64;
        pending_t *items = realloc(stack->items, capacity * sizeof(pending_t));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        stack->items = items;
        stack->capacity = capacity;
    }
    char *path = malloc(prefix_length + name_length + 1);
    if (path == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(path, prefix, prefix_length);
    memcpy(path + prefix_length, name, name_length);
    path[prefix_length + name_length] = '\0';
    pending_t *item = &stack->items[stack->count++];
    item->path = path;
    item->length = prefix_length + name_length;
    item->st = *st;
    return 0;
}

static long long ctime_ns(const struct stat *st) {
    return (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;
}

static PyObject *identity_of(const struct stat *st) {
    return Py_BuildValue("(KK)", (unsigned long long)st->st_dev, (unsigned long long)st->st_ino);
}

/* gitcheck._index_entry_valid(entry, ctime): (ctime, entries or -1 for a leaf, `.git` there,
 * `HEAD` there, subdirectories' names or None), taken at `ctime`. */
static int entry_valid(PyObject *entry, PyObject *ctime) {
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 5) {
        return 0;
    }
    int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(entry, 0), ctime, Py_EQ);
    if (same <= 0) {
        return same;
    }
    PyObject *count = PyTuple_GET_ITEM(entry, 1);
    if (!PyLong_CheckExact(count)) {
        return 0;
    }
    return _PyLong_Sign(count) < 0 || PyList_CheckExact(PyTuple_GET_ITEM(entry, 4));
}

/* The index's entry for `key` where it is valid at `ctime` and of the kind asked (a leaf's: a
 * negative count; a listing's: a count of 0 or more), as a new reference in `*known`; 1 then, 0
 * where there is none, -1 on a Python error. (The stand-in's `known is not None and
 * valid(known, st.st_ctime_ns) and known[1] < 0` — or `>= 0`.) */
static int index_entry(PyObject *prior, PyObject *key, PyObject *ctime, int leaf, PyObject **known) {
    *known = NULL;
    PyObject *entry = PyDict_GetItemWithError(prior, key);
    if (entry == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (entry == Py_None) {
        return 0;
    }
    Py_INCREF(entry);
    int valid = entry_valid(entry, ctime);
    if (valid <= 0 || (_PyLong_Sign(PyTuple_GET_ITEM(entry, 1)) < 0) != leaf) {
        Py_DECREF(entry);
        return valid < 0 ? -1 : 0;
    }
    *known = entry;
    return 1;
}

/* `left - count` as the stand-in's `left -= count`, where only the sign of the result matters
 * beyond 64 bits: clamped. */
static long long minus(long long left, PyObject *count) {
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(count, &overflow);
    if (overflow > 0) {
        return -1;
    }
    if (overflow < 0) {
        return LLONG_MAX;
    }
    if (n > 0 && left < LLONG_MIN + n) {
        return -1;
    }
    if (n < 0 && left > LLONG_MAX + n) {
        return LLONG_MAX;
    }
    return left - n;
}

/* `_Walk._as_listed`: (count, has_git, has_head, names) of a listing known from before, each name
 * looked at now. Returns 1 and fills `subs` (lstats) where every name is a directory now, 0 where
 * one is not (the caller lists the directory), -1 on a Python error. */
static int as_listed(const char *prefix, size_t prefix_length, PyObject *names, struct stat **subs, Py_ssize_t *count) {
    Py_ssize_t n = PyList_GET_SIZE(names);
    *subs = NULL;
    *count = 0;
    if (n == 0) {
        return 1;
    }
    struct stat *stats = malloc(sizeof(struct stat) * (size_t)n);
    if (stats == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names) && i < n; i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            free(stats);
            return 0;  /* (the stand-in's TypeError) */
        }
        PyObject *encoded = PyUnicode_EncodeFSDefault(name);
        if (encoded == NULL) {
            PyErr_Clear();
            free(stats);
            return 0;  /* (its ValueError, UnicodeEncodeError) */
        }
        const char *bytes = PyBytes_AS_STRING(encoded);
        size_t length = (size_t)PyBytes_GET_SIZE(encoded);
        if (strlen(bytes) != length) {
            Py_DECREF(encoded);
            free(stats);
            return 0;  /* an embedded NUL: its ValueError */
        }
        char *path = malloc(prefix_length + length + 1);
        if (path == NULL) {
            Py_DECREF(encoded);
            free(stats);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(path, prefix, prefix_length);
        memcpy(path + prefix_length, bytes, length + 1);
        Py_DECREF(encoded);
        int failed = lstat(path, &stats[i]);
        free(path);
        if (failed != 0 || !S_ISDIR(stats[i].st_mode)) {
            free(stats);
            return 0;
        }
    }
    *subs = stats;
    *count = n;
    return 1;
}

/* `_Walk._list`: lists `path` now. Returns 0 with (count, has_git, has_head, names) in `listed`
 * and the subdirectories' lstats in `subs`; an errno where it cannot be listed; -1 on a Python error. */
/* The lstat of `prefix` + `name` by its whole path, as DirEntry.stat of a scandir by path makes it
 * (relative to the directory's fd it would succeed where the whole path is too long, and the
 * stand-in's listing fails there: the same answer, not a cheaper one). */
static int lstat_below(const char *prefix, size_t prefix_length, const char *name, struct stat *st) {
    size_t name_length = strlen(name);
    char *path = malloc(prefix_length + name_length + 1);
    if (path == NULL) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(path, prefix, prefix_length);
    memcpy(path + prefix_length, name, name_length + 1);
    int failed = lstat(path, st);
    int saved = errno;
    free(path);
    errno = saved;
    return failed;
}

/* Whether `name` ("/.git", "/HEAD") is in the leaf directory `probe[:length]` (an lstat as the
 * effective user that builds nothing): 1 there, 0 not (ENOENT, ENOTDIR), else -errno. Only "no
 * such file" is an answer: EACCES (the command made the leaf unsearchable to its own uid, the
 * parent's, while other users still may: session 14) or ENAMETOOLONG is a leaf that cannot be
 * looked into, which fails the check closed as a directory that cannot be listed does. */
static int leaf_lookup(char *probe, size_t length, const char *name) {
    memcpy(probe + length, name, strlen(name) + 1);
    if (faccessat(AT_FDCWD, probe, F_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW) == 0) {
        return 1;
    }
    if (errno == ENOENT || errno == ENOTDIR) {
        return 0;
    }
    return -(errno ? errno : EIO);
}

static int list_now(const char *path, const char *prefix, size_t prefix_length, PyObject *prefix_text,
                    PyObject *exclude, PyObject **listed, struct stat **subs, Py_ssize_t *sub_count) {
    *listed = NULL;
    *subs = NULL;
    *sub_count = 0;
    DIR *dir = opendir(path);
    if (dir == NULL) {
        return errno ? errno : EIO;
    }
    long long count = 0;
    int has_git = 0, has_head = 0, error = 0;
    size_t capacity = 0;
    struct stat *stats = NULL;
    PyObject *names = PyList_New(0);
    if (names == NULL) {
        closedir(dir);
        return -1;
    }
    for (;;) {
        errno = 0;
        struct dirent *entry = readdir(dir);
        if (entry == NULL) {
            error = errno;
            break;
        }
        const char *name = entry->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) {
            continue;
        }
        count++;
        if (strcmp(name, ".git") == 0) {
            has_git = 1;
            continue;
        }
        if (strcmp(name, "HEAD") == 0) {
            has_head = 1;
        }
        struct stat st;
        int have_stat = 0;
        if (entry->d_type == DT_UNKNOWN) {
            /* (DirEntry.is_dir without a type: an lstat, FileNotFoundError as "no") */
            if (lstat_below(prefix, prefix_length, name, &st) != 0) {
                if (errno == ENOENT) {
                    continue;
                }
                error = errno;
                break;
            }
            if (!S_ISDIR(st.st_mode)) {
                continue;
            }
            have_stat = 1;
        } else if (entry->d_type != DT_DIR) {
            continue;
        }
        size_t name_length = strlen(name);
        PyObject *decoded = PyUnicode_DecodeFSDefaultAndSize(name, (Py_ssize_t)name_length);
        if (decoded == NULL) {
            error = -1;
            break;
        }
        if (prefix_text != NULL) {  /* the run's {tmp} */
            PyObject *full = PyUnicode_Concat(prefix_text, decoded);  /* (DirEntry.path) */
            if (full == NULL) {
                Py_DECREF(decoded);
                error = -1;
                break;
            }
            int excluded = PySet_Contains(exclude, full);
            Py_DECREF(full);
            if (excluded != 0) {
                Py_DECREF(decoded);
                if (excluded < 0) {
                    error = -1;
                    break;
                }
                continue;
            }
        }
        if (!have_stat && lstat_below(prefix, prefix_length, name, &st) != 0) {
            /* (DirEntry.stat's OSError: the listing fails) */
            Py_DECREF(decoded);
            error = errno;
            break;
        }
        int appended = PyList_Append(names, decoded);
        Py_DECREF(decoded);
        if (appended < 0) {
            error = -1;
            break;
        }
        if ((size_t)*sub_count == capacity) {
            capacity = capacity ? capacity * 2 : 16;
            struct stat *grown = realloc(stats, capacity * sizeof(struct stat));
            if (grown == NULL) {
                PyErr_NoMemory();
                error = -1;
                break;
            }
            stats = grown;
        }
        stats[(*sub_count)++] = st;
    }
    closedir(dir);
    if (error != 0) {
        Py_DECREF(names);
        free(stats);
        *sub_count = 0;
        return error;
    }
    *listed = Py_BuildValue("(LNNN)", count, PyBool_FromLong(has_git), PyBool_FromLong(has_head), names);
    if (*listed == NULL) {
        free(stats);
        *sub_count = 0;
        return -1;
    }
    *subs = stats;
    return 0;
}

static int add_event(PyObject *events, int kind, const char *path, int error) {
    PyObject *event = kind == 2 ? Py_BuildValue("(iO&i)", kind, PyUnicode_DecodeFSDefault, path, error)
                                : Py_BuildValue("(iO&)", kind, PyUnicode_DecodeFSDefault, path);
    if (event == NULL) {
        return -1;
    }
    int failed = PyList_Append(events, event);
    Py_DECREF(event);
    return failed;
}

/* Truth of an object of the index (`if has_git:`); -1 on error. */
static int truth(PyObject *value) {
    return PyObject_IsTrue(value);
}

PyDoc_STRVAR(walk_scan_doc,
"walk_scan(root, left, census, prior, listings, since, tracked, cut, gathered, exclude) -> (left, events)\n\n"
"The git check's walk of one write root (gitcheck._Walk.scan; its Python stand-in makes the same decisions).");

static PyObject *walk_scan(PyObject *self, PyObject *args) {
    PyObject *root, *prior, *listings, *since_obj, *cut_obj, *gathered, *exclude;
    long long left;
    int census, tracked;
    if (!PyArg_ParseTuple(args, "ULpOOOpOOO", &root, &left, &census, &prior, &listings, &since_obj, &tracked, &cut_obj,
                          &gathered, &exclude)) {
        return NULL;
    }
    if ((prior != Py_None && !PyDict_Check(prior)) || !PyDict_Check(listings)
        || (gathered != Py_None && !PyDict_Check(gathered)) || (exclude != Py_None && !PyAnySet_Check(exclude))) {
        PyErr_SetString(PyExc_TypeError, "walk_scan: prior, listings, gathered: dicts; exclude: a set");
        return NULL;
    }
    long long since = PyLong_AsLongLong(since_obj);
    if (since == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long cut = 0;
    if (cut_obj != Py_None) {
        cut = PyLong_AsLongLong(cut_obj);
        if (cut == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    int use_prior = prior != Py_None && PyDict_GET_SIZE(prior) > 0;  /* (`if prior`) */
    PyObject *root_bytes = PyUnicode_EncodeFSDefault(root);
    if (root_bytes == NULL) {
        return NULL;
    }
    PyObject *events = PyList_New(0);
    if (events == NULL) {
        Py_DECREF(root_bytes);
        return NULL;
    }
    stack_t_ stack = {NULL, 0, 0};
    struct stat root_st;
    int failed = 0;
    if (strlen(PyBytes_AS_STRING(root_bytes)) != (size_t)PyBytes_GET_SIZE(root_bytes)
        || lstat(PyBytes_AS_STRING(root_bytes), &root_st) != 0) {
        Py_DECREF(root_bytes);
        return Py_BuildValue("(LN)", left, events);  /* (os.lstat's OSError, ValueError: nothing walked) */
    }
    if (push(&stack, PyBytes_AS_STRING(root_bytes), (size_t)PyBytes_GET_SIZE(root_bytes), "", 0, &root_st) < 0) {
        Py_DECREF(root_bytes);
        Py_DECREF(events);
        return NULL;
    }
    Py_DECREF(root_bytes);
    int stop = 0;
    unsigned long walked = 0;
    while (stack.count > 0 && !failed) {
        if ((++walked & 4095) == 0 && PyErr_CheckSignals() < 0) {
            failed = 1;  /* (a signal's handler raised, as it would between two of the stand-in's steps) */
            break;
        }
        pending_t item = stack.items[--stack.count];
        const char *directory = item.path;
        struct stat *st = &item.st;
        left -= 1;
        PyObject *key = NULL, *ctime = NULL, *known = NULL, *listed = NULL;
        struct stat *subs = NULL;
        Py_ssize_t sub_count = 0;
        int leaf = st->st_nlink == 2;
        if (leaf && census) {
            free(item.path);  /* (at launch a leaf is not looked into: see the stand-in) */
            continue;
        }
        key = identity_of(st);
        ctime = PyLong_FromLongLong(ctime_ns(st));
        if (key == NULL || ctime == NULL || (use_prior && (leaf || census)
                                             && index_entry(prior, key, ctime, leaf, &known) < 0)) {
            failed = 1;
            goto next;
        }
        if (leaf) {
            PyObject *has_git = NULL, *has_head = NULL;
            if (known != NULL) {
                /* the names the last walk looked up (its ctime is theirs) */
                has_git = PyTuple_GET_ITEM(known, 2);
                has_head = PyTuple_GET_ITEM(known, 3);
                Py_INCREF(has_git);
                Py_INCREF(has_head);
            }
            if (has_git == NULL) {
                size_t length = item.length;
                char *probe = malloc(length + 6);
                if (probe == NULL) {
                    PyErr_NoMemory();
                    failed = 1;
                    goto next;
                }
                memcpy(probe, directory, length);
                int git_found = leaf_lookup(probe, length, "/.git");
                int head_found = git_found < 0 ? git_found : leaf_lookup(probe, length, "/HEAD");
                free(probe);
                if (git_found < 0 || head_found < 0) {
                    /* (the stand-in's event: a leaf that cannot be looked into is an unlistable directory) */
                    if (add_event(events, 2, directory, -(git_found < 0 ? git_found : head_found)) < 0) {
                        failed = 1;
                    }
                    goto next;
                }
                has_git = PyBool_FromLong(git_found);
                has_head = PyBool_FromLong(head_found);
            }
            if (gathered != Py_None && ctime_ns(st) < cut) {
                PyObject *entry = Py_BuildValue("(OiOOO)", ctime, -1, has_git, has_head, Py_None);
                if (entry == NULL || PyDict_SetItem(gathered, key, entry) < 0) {
                    Py_XDECREF(entry);
                    Py_DECREF(has_git);
                    Py_DECREF(has_head);
                    failed = 1;
                    goto next;
                }
                Py_DECREF(entry);
            }
            int git_there = truth(has_git), head_there = truth(has_head);
            Py_DECREF(has_git);
            Py_DECREF(has_head);
            if (git_there < 0 || head_there < 0 || (git_there && add_event(events, 0, directory, 0) < 0)
                || (head_there && add_event(events, 1, directory, 0) < 0)) {
                failed = 1;
            }
            goto next;
        }
        size_t prefix_length = item.length;
        char *prefix = malloc(item.length + 2);
        if (prefix == NULL) {
            PyErr_NoMemory();
            failed = 1;
            goto next;
        }
        memcpy(prefix, directory, item.length);
        if (item.length == 0 || directory[item.length - 1] != '/') {
            prefix[prefix_length++] = '/';
        }
        prefix[prefix_length] = '\0';
        if (census) {
            if (known != NULL) {
                int got = as_listed(prefix, prefix_length, PyTuple_GET_ITEM(known, 4), &subs, &sub_count);
                if (got > 0) {
                    listed = PyTuple_GetSlice(known, 1, 5);
                }
                if (got < 0 || (got > 0 && listed == NULL)) {
                    free(prefix);
                    failed = 1;
                    goto next;
                }
            }
        } else if (ctime_ns(st) < since && tracked) {
            PyObject *before = PyDict_GetItemWithError(listings, key);
            if (before == NULL && PyErr_Occurred()) {
                free(prefix);
                failed = 1;
                goto next;
            }
            /* (the census's own listing: a 4-tuple of (count, has_git, has_head, names)) */
            if (before != NULL && before != Py_None) {
                if (!PyTuple_Check(before) || PyTuple_GET_SIZE(before) != 4 || !PyList_Check(PyTuple_GET_ITEM(before, 3))) {
                    PyErr_SetString(PyExc_TypeError, "walk_scan: a listing of another shape");
                    free(prefix);
                    failed = 1;
                    goto next;
                }
                int got = as_listed(prefix, prefix_length, PyTuple_GET_ITEM(before, 3), &subs, &sub_count);
                if (got < 0) {
                    free(prefix);
                    failed = 1;
                    goto next;
                }
                if (got) {
                    listed = before;
                    Py_INCREF(listed);
                }
            }
        }
        if (listed == NULL) {
            PyObject *prefix_text = NULL;
            if (exclude != Py_None && PySet_GET_SIZE(exclude) > 0) {
                prefix_text = PyUnicode_DecodeFSDefaultAndSize(prefix, (Py_ssize_t)prefix_length);
                if (prefix_text == NULL) {
                    free(prefix);
                    failed = 1;
                    goto next;
                }
            }
            int error = list_now(directory, prefix, prefix_length, prefix_text, exclude, &listed, &subs, &sub_count);
            Py_XDECREF(prefix_text);
            if (error < 0) {
                free(prefix);
                failed = 1;
                goto next;
            }
            if (error > 0) {
                free(prefix);
                if (add_event(events, 2, directory, error) < 0) {
                    failed = 1;
                }
                goto next;
            }
        }
        if (census) {
            if (PyDict_SetItem(listings, key, listed) < 0) {
                free(prefix);
                failed = 1;
                goto next;
            }
        } else if (gathered != Py_None && ctime_ns(st) < cut) {
            PyObject *entry = PyTuple_New(5);
            if (entry == NULL) {
                free(prefix);
                failed = 1;
                goto next;
            }
            PyTuple_SET_ITEM(entry, 0, ctime);
            Py_INCREF(ctime);
            for (Py_ssize_t i = 0; i < 4; i++) {
                PyObject *part = PyTuple_GET_ITEM(listed, i);
                Py_INCREF(part);
                PyTuple_SET_ITEM(entry, i + 1, part);
            }
            int set = PyDict_SetItem(gathered, key, entry);
            Py_DECREF(entry);
            if (set < 0) {
                free(prefix);
                failed = 1;
                goto next;
            }
        }
        {
            left = minus(left, PyTuple_GET_ITEM(listed, 0));
            int git_there = truth(PyTuple_GET_ITEM(listed, 1)), head_there = truth(PyTuple_GET_ITEM(listed, 2));
            if (git_there < 0 || head_there < 0 || (git_there && add_event(events, 0, directory, 0) < 0)
                || (head_there && add_event(events, 1, directory, 0) < 0)) {
                free(prefix);
                failed = 1;
                goto next;
            }
            PyObject *names = PyTuple_GET_ITEM(listed, 3);
            for (Py_ssize_t i = 0; i < sub_count && !failed; i++) {
                PyObject *encoded = PyUnicode_EncodeFSDefault(PyList_GET_ITEM(names, i));
                if (encoded == NULL) {
                    failed = 1;
                    break;
                }
                if (push(&stack, prefix, prefix_length, PyBytes_AS_STRING(encoded), (size_t)PyBytes_GET_SIZE(encoded),
                         &subs[i]) < 0) {
                    failed = 1;
                }
                Py_DECREF(encoded);
            }
            free(prefix);
            stop = !failed && left < 0;  /* (the budget is asked after a listing only, as the stand-in does) */
        }
    next:
        Py_XDECREF(key);
        Py_XDECREF(ctime);
        Py_XDECREF(known);
        Py_XDECREF(listed);
        free(subs);
        free(item.path);
        if (stop) {
            break;
        }
    }
    for (size_t i = 0; i < stack.count; i++) {
        free(stack.items[i].path);
    }
    free(stack.items);
    if (failed) {
        Py_DECREF(events);
        return NULL;
    }
    return Py_BuildValue("(LN)", left, events);
}

PyDoc_STRVAR(real_path_doc, "real_path(path: str) -> str: realpath(3) of path; OSError where it fails");

static PyObject *real_path(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "real_path: a str path");
        return NULL;
    }
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes)) {
        return NULL;  /* (an embedded NUL: ValueError, as os.path.realpath's lstat raises) */
    }
    char resolved[PATH_MAX];
    char *got = realpath(PyBytes_AS_STRING(bytes), resolved);
    Py_DECREF(bytes);
    if (got == NULL) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyUnicode_DecodeFSDefault(resolved);
}

PyMethodDef sandboy_walk_methods[] = {
    {"walk_scan", walk_scan, METH_VARARGS, walk_scan_doc},
    {"real_path", real_path, METH_O, real_path_doc},
    {NULL, NULL, 0, NULL},
};

#ifndef WALK_SOURCE_SIZE
#define WALK_SOURCE_SIZE -1
#endif

/* Called from _native's module init: adds walk_scan, real_path and WALK_SOURCE_SIZE. */
int sandboy_walk_add(PyObject *module) {
    if (PyModule_AddFunctions(module, sandboy_walk_methods) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "WALK_SOURCE_SIZE", WALK_SOURCE_SIZE);
}
