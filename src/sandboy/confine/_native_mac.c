/* The cache's seal (ADR 0030): keyed BLAKE2b-256 and the per-user secret in the kernel's user
 * keyring, for `sandboy.cache_seal`.
 *
 * Why in C: every plan cache hit checks the seal of the files it reads (its entry, the namespace
 * note, a walk index), and the stdlib's keyed BLAKE2 (`_blake2`) costs ≈ 0.2 ms to import on this
 * machine — about what a hit's whole git check costs (docs/performance.md "Session 14 —
 * cachekey14"). This module is already loaded by then (it is the C executor's extension). The
 * stand-in for SANDBOY_NATIVE=0 or no build, `_libc_python.mac`/`user_key`, uses hashlib's
 * BLAKE2b and must give the same bytes: tests/test_cache_seal.py holds both to each other on many
 * inputs (and to hashlib's own keyed BLAKE2b).
 *
 * Compiled into `sandboy.confine._native` (setup.py), added from its module init.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* --- BLAKE2b (RFC 7693), keyed, 32-byte digest --------------------------------------------- */

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

typedef struct {
    uint64_t h[8], t[2];
    uint8_t buf[128];
    size_t fill;
} blake2b_t;

static inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);  /* x86_64 (the syscall numbers here are too): little-endian */
    return v;
}

#define G(a, b, c, d, x, y)              \
    do {                                 \
        v[a] = v[a] + v[b] + (x);        \
        v[d] = rotr(v[d] ^ v[a], 32);    \
        v[c] = v[c] + v[d];              \
        v[b] = rotr(v[b] ^ v[c], 24);    \
        v[a] = v[a] + v[b] + (y);        \
        v[d] = rotr(v[d] ^ v[a], 16);    \
        v[c] = v[c] + v[d];              \
        v[b] = rotr(v[b] ^ v[c], 63);    \
    } while (0)

static void compress(blake2b_t *s, const uint8_t *block, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++)
        m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= s->t[0];
    v[13] ^= s->t[1];
    if (last)
        v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *z = SIGMA[r];
        G(0, 4, 8, 12, m[z[0]], m[z[1]]);
        G(1, 5, 9, 13, m[z[2]], m[z[3]]);
        G(2, 6, 10, 14, m[z[4]], m[z[5]]);
        G(3, 7, 11, 15, m[z[6]], m[z[7]]);
        G(0, 5, 10, 15, m[z[8]], m[z[9]]);
        G(1, 6, 11, 12, m[z[10]], m[z[11]]);
        G(2, 7, 8, 13, m[z[12]], m[z[13]]);
        G(3, 4, 9, 14, m[z[14]], m[z[15]]);
    }
    for (int i = 0; i < 8; i++)
        s->h[i] ^= v[i] ^ v[i + 8];
}

static void counter_add(blake2b_t *s, uint64_t n) {
    s->t[0] += n;
    if (s->t[0] < n)
        s->t[1]++;
}

static void update(blake2b_t *s, const uint8_t *in, size_t len) {
    while (len > 0) {
        if (s->fill == 128) {  /* a full buffer is compressed only once more input comes */
            counter_add(s, 128);
            compress(s, s->buf, 0);
            s->fill = 0;
        }
        size_t take = 128 - s->fill;
        if (take > len)
            take = len;
        memcpy(s->buf + s->fill, in, take);
        s->fill += take;
        in += take;
        len -= take;
    }
}

static void init_keyed(blake2b_t *s, const uint8_t *key, size_t keylen) {
    memcpy(s->h, IV, sizeof IV);
    s->h[0] ^= 0x01010000ULL ^ ((uint64_t)keylen << 8) ^ 32;  /* fanout 1, depth 1, key length, 32-byte digest */
    s->t[0] = s->t[1] = 0;
    s->fill = 0;
    uint8_t block[128] = {0};
    memcpy(block, key, keylen);
    update(s, block, 128);  /* the key, zero-padded, is the first block */
}

static void final(blake2b_t *s, uint8_t out[32]) {
    counter_add(s, s->fill);
    memset(s->buf + s->fill, 0, 128 - s->fill);
    compress(s, s->buf, 1);
    memcpy(out, s->h, 32);  /* little-endian words */
}

PyDoc_STRVAR(mac_doc,
"mac(key: bytes, label: bytes, data: buffer) -> bytes\n\n"
"The cache seal's tag: keyed BLAKE2b with a 32-byte digest (`key`: 1 to 64 bytes) over the\n"
"label's length (8 bytes, little-endian), the label and `data`.");

static PyObject *mac(PyObject *self, PyObject *args) {
    Py_buffer key, label, data;
    if (!PyArg_ParseTuple(args, "y*y*y*", &key, &label, &data))
        return NULL;
    PyObject *result = NULL;
    if (key.len < 1 || key.len > 64) {
        PyErr_SetString(PyExc_ValueError, "mac(): the key must be 1 to 64 bytes");
        goto done;
    }
    blake2b_t s;
    uint8_t out[32], length[8];
    uint64_t n = (uint64_t)label.len;
    memcpy(length, &n, 8);
    Py_BEGIN_ALLOW_THREADS
    init_keyed(&s, key.buf, (size_t)key.len);
    update(&s, length, 8);
    update(&s, label.buf, (size_t)label.len);
    update(&s, data.buf, (size_t)data.len);
    final(&s, out);
    Py_END_ALLOW_THREADS
    result = PyBytes_FromStringAndSize((const char *)out, 32);
    memset(&s, 0, sizeof s);
done:
    PyBuffer_Release(&key);
    PyBuffer_Release(&label);
    PyBuffer_Release(&data);
    return result;
}

/* --- the secret: a "user" key in the kernel's user keyring ---------------------------------- */

#define KEY_SPEC_USER_KEYRING (-4)
#define KEYCTL_SETPERM 5
#define KEYCTL_SEARCH 10
#define KEYCTL_READ 11
#define SECRET_BYTES 32

static long read_key(long serial, uint8_t *out) {
    return syscall(SYS_keyctl, KEYCTL_READ, serial, out, (long)SECRET_BYTES);
}

PyDoc_STRVAR(user_key_doc,
"user_key(description: bytes, perm: int) -> bytes | None\n\n"
"The 32 bytes of the \"user\" key `description` in this user's keyring (@u), made there from\n"
"getrandom(2) with permissions `perm` when missing. None where the keyring cannot be used\n"
"(keyctl refused: a container's seccomp, a cage; no keys support): no secret, no cache.");

static PyObject *user_key(PyObject *self, PyObject *args) {
    const char *description;
    unsigned long perm;
    if (!PyArg_ParseTuple(args, "yk", &description, &perm))
        return NULL;
    uint8_t secret[SECRET_BYTES];
    long serial, got = -1;
    Py_BEGIN_ALLOW_THREADS
    serial = syscall(SYS_keyctl, KEYCTL_SEARCH, (long)KEY_SPEC_USER_KEYRING, "user", description, 0L);
    if (serial < 0 && errno == ENOKEY) {
        uint8_t fresh[SECRET_BYTES];
        if (syscall(SYS_getrandom, fresh, sizeof fresh, 0) == (long)sizeof fresh) {
            serial = syscall(SYS_add_key, "user", description, fresh, sizeof fresh, (long)KEY_SPEC_USER_KEYRING);
            if (serial >= 0 && syscall(SYS_keyctl, KEYCTL_SETPERM, serial, perm) < 0)
                serial = -1;  /* (not left readable wider than asked: unused) */
        }
        memset(fresh, 0, sizeof fresh);
    }
    /* read back, not the bytes made here: a racing first run's add_key replaced ours (one key) */
    if (serial >= 0)
        got = read_key(serial, secret);
    Py_END_ALLOW_THREADS
    if (got != SECRET_BYTES)
        Py_RETURN_NONE;
    PyObject *result = PyBytes_FromStringAndSize((const char *)secret, SECRET_BYTES);
    memset(secret, 0, sizeof secret);
    return result;
}

static PyMethodDef mac_methods[] = {
    {"mac", mac, METH_VARARGS, mac_doc},
    {"user_key", user_key, METH_VARARGS, user_key_doc},
    {NULL, NULL, 0, NULL},
};

/* Called from _native's module init: adds mac and user_key. */
int sandboy_mac_add(PyObject *module) {
    return PyModule_AddFunctions(module, mac_methods);
}
