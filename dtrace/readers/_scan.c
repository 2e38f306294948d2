/* A compiled scanner of Kineto (Chrome-trace) events: one pass over a block of the events
 * array, no Python object per event. See dtrace/readers/_scanned.py for the contract; the
 * pure-Python path (msgspec) stays the reference, and anything this scanner does not decode
 * itself goes to it:
 *
 * - the block is not a JSON array this scanner can walk (malformed, too deep, trailing text):
 *   scan() returns None and the caller decodes the block with msgspec;
 * - one event holds something rare or unusual (an escape or a non-ASCII byte outside the
 *   names, a value of an unexpected type, an integer written as a string or beyond int64, a
 *   duplicate key, an argument only some events carry): its byte span is recorded and the
 *   caller decodes that event with msgspec.
 *
 * CPython C API only; columns are returned as bytes (wrapped by numpy.frombuffer).
 *
 * The Scanner as a Python object (issue 31): every piece of state is made by tp_new, so an
 * object made by Scanner.__new__ alone scans; __init__ takes no arguments and runs once (a
 * second call raises RuntimeError: the codes already handed out must keep their strings); the
 * interned strings are read through views (ScannerStrings, ScannerCodes) whose only writes
 * intern a string (atomically, with the code the scanner gives it), so Python cannot make two
 * strings share a code or put a non-code in the table; the type takes part in garbage
 * collection; pickling raises TypeError; a scan re-entered (a finaliser run mid-scan) raises
 * RuntimeError. Interning hashes with keys drawn from os.urandom per Scanner, so names cannot
 * be crafted to collide; the table stays at most half full.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#ifndef Py_NO_INLINE
#define Py_NO_INLINE
#endif

#define NOVAL INT64_MIN /* an integer argument absent or null */
#define MAX_DEPTH 200 /* deeper values: the block goes to msgspec (whose own limit is deeper) */

enum { C_CAT, C_NAME, C_PID, C_TID, C_FLAGS, C_TS, C_DUR, C_CORR, C_EXT, C_EXT_OLD, C_SEQ, C_DEV, C_STREAM, N_COLS };
static const int col_size[N_COLS] = {4, 4, 8, 8, 1, 8, 8, 8, 8, 8, 8, 8, 8};
enum { F_PID_STR = 1, F_TID_STR = 2 };
/* an integer argument absent or null: the value the pure path gives it (kineto._ARG_DEFAULTS) */
static const int64_t arg_default[N_COLS] = {0, 0, 0, 0, 0, 0, 0, -1, INT64_MIN, -1, -1, -2, -2};
enum { AUX_DIMS, AUX_TYPE, AUX_STRIDES, AUX_CONCRETE, AUX_KIND, AUX_BYTES }; /* AUX_BYTES: (value, 0) */

typedef struct {
    char *p;
    Py_ssize_t n, cap; /* bytes */
} Buf;

/* room for add more bytes (sizes checked for overflow: MemoryError, never a wrapped size) */
static Py_NO_INLINE int buf_grow(Buf *b, Py_ssize_t add) {
    if (add < 0 || add > PY_SSIZE_T_MAX - b->n) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->n + add, cap = b->cap ? b->cap : 4096;
    while (cap < need) cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, Py_ssize_t add) {
    if (add <= b->cap - b->n) return 0;
    return buf_grow(b, add);
}

typedef struct {
    uint64_t h;
    Py_ssize_t off; /* of the key in the arena */
    int32_t len;    /* -1: empty slot */
    int32_t code;
} Entry;

typedef struct {
    PyObject_HEAD
    PyObject *strings; /* list: code -> str (read from Python through a ScannerStrings view) */
    PyObject *codes;   /* dict: str -> code (through a ScannerCodes view); NULL both once cleared by the GC */
    Entry *tab;        /* open addressing (linear probing), at most half full */
    size_t tab_cap, tab_n;
    uint64_t key[3];   /* the hash keys, from os.urandom */
    Buf arena;
    Buf cols[N_COLS];
    Buf fb;  /* int64 triples: record, start, end (the events msgspec decodes) */
    Buf aux; /* int64 quads: record, field, start, end (argument texts) */
    int inited; /* __init__ ran (it runs once) */
    int busy;   /* a scan is running */
} Scanner;

/* character classes */
static unsigned char cls[256];
enum { K_PLAIN = 0, K_QUOTE, K_BSLASH, K_CTRL, K_HIGH };
static unsigned char ws[256];

static void init_tables(void) {
    for (int i = 0; i < 256; i++) cls[i] = i < 0x20 ? K_CTRL : i >= 0x80 ? K_HIGH : K_PLAIN;
    cls['"'] = K_QUOTE;
    cls['\\'] = K_BSLASH;
    ws[' '] = ws['\t'] = ws['\n'] = ws['\r'] = 1;
}

#define SKIP_WS(p, end) \
    while ((p) < (end) && ws[(unsigned char)*(p)]) (p)++

/* string flags */
enum { S_ESC = 1, S_HIGH = 2, S_UESC = 4 };

static int ishex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* p just after the opening quote; returns the closing quote, or NULL (invalid JSON) */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* a nonzero mask where one of the 8 bytes of v is '"', '\\', a control character or non-ASCII */
static inline uint64_t special8(uint64_t v) {
    uint64_t q = v ^ (ONES * '"'), b = v ^ (ONES * '\\');
    return ((q - ONES) & ~q) | ((b - ONES) & ~b) | (v - ONES * 0x20) | v;
}

static const char *scan_string(const char *p, const char *end, int *flags) {
    for (;;) {
        while (end - p >= 8) { /* 8 plain bytes at a time */
            uint64_t v;
            memcpy(&v, p, 8);
            if (special8(v) & HIGHS) break;
            p += 8;
        }
        while (p < end && cls[(unsigned char)*p] == K_PLAIN) p++;
        if (p >= end) return NULL;
        switch (cls[(unsigned char)*p]) {
            case K_QUOTE:
                return p;
            case K_BSLASH:
                *flags |= S_ESC;
                if (p + 1 >= end) return NULL;
                switch (p[1]) {
                    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                        p += 2;
                        break;
                    case 'u':
                        if (p + 6 > end || !ishex(p[2]) || !ishex(p[3]) || !ishex(p[4]) || !ishex(p[5])) return NULL;
                        *flags |= S_UESC;
                        p += 6;
                        break;
                    default:
                        return NULL;
                }
                break;
            case K_HIGH:
                *flags |= S_HIGH;
                p++;
                break;
            default: /* a control character: not JSON */
                return NULL;
        }
    }
}

typedef struct {
    int is_int;      /* integer grammar and within int64 (not INT64_MIN) */
    int64_t ival;
    int float_ok;    /* dval holds the correctly rounded value */
    double dval;
} Num;

static const double pow10tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* a JSON number at p; returns the end, or NULL (not a JSON number) */
static const char *parse_number(const char *p, const char *end, Num *o) {
    const char *s = p;
    int neg = 0;
    uint64_t m = 0;
    int nd = 0;         /* significant digits accumulated into m */
    int dropped = 0;    /* significant digits beyond 19 */
    int e10 = 0, is_int = 1;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            if (nd < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                nd++;
            } else {
                dropped++;
            }
            p++;
        }
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') {
            if (m == 0 && *p == '0') {
                e10--;
            } else if (nd < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                nd++;
                e10--;
            } else {
                dropped++;
            }
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        int eneg = 0, ex = 0;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ex < 100000) ex = ex * 10 + (*p - '0');
            p++;
        }
        e10 += eneg ? -ex : ex;
    }
    o->is_int = 0;
    o->float_ok = 0;
    if (is_int && !dropped && (m <= (uint64_t)INT64_MAX)) {
        o->is_int = 1;
        o->ival = neg ? -(int64_t)m : (int64_t)m;
    }
    /* the float value: exact operands and one correctly rounded operation, else the slow path */
    if (!dropped && m <= ((uint64_t)1 << 53) && e10 >= -22 && e10 <= 22) {
        double d = (double)m;
        d = e10 < 0 ? d / pow10tab[-e10] : d * pow10tab[e10];
        o->dval = neg && !(is_int && m == 0) ? -d : d; /* the integer -0 is 0, as msgspec reads it */
        o->float_ok = 1;
    } else if (is_int && !dropped) {
        double d = (double)m; /* one correctly rounded conversion */
        o->dval = neg ? -d : d;
        o->float_ok = 1;
    } else if (p - s < 512) {
        char tmp[520];
        memcpy(tmp, s, (size_t)(p - s));
        tmp[p - s] = 0;
        double d = PyOS_string_to_double(tmp, NULL, NULL);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
        } else if (isfinite(d) && !(d == 0.0 && m != 0)) {
            o->dval = d;
            o->float_ok = 1;
        }
    }
    return p;
}

static inline int isdigit_(char c) { return c >= '0' && c <= '9'; }

/* the end of the JSON number at p (its grammar only), NULL if not one */
static const char *skip_number(const char *p, const char *end) {
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && isdigit_(*p)) p++;
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !isdigit_(*p)) return NULL;
        while (p < end && isdigit_(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !isdigit_(*p)) return NULL;
        while (p < end && isdigit_(*p)) p++;
    }
    return p;
}

/* past the literal lit (n bytes: true, false, null) at p; NULL: not that literal */
static inline const char *after_literal(const char *p, const char *end, const char *lit, Py_ssize_t n) {
    return (end - p >= n && memcmp(p, lit, (size_t)n) == 0) ? p + n : NULL;
}

/* a member's key and its ':' at p (a '"' expected): the key's bytes (*k, *klen; *kf: escapes
   or non-ASCII bytes in it) and where the value starts; NULL: invalid JSON or the end of the block */
static const char *read_key(const char *p, const char *end, const char **k, Py_ssize_t *klen, int *kf) {
    if (p >= end || *p != '"') return NULL;
    *kf = 0;
    *k = p + 1;
    const char *q = scan_string(*k, end, kf);
    if (!q) return NULL;
    *klen = q - *k;
    p = q + 1;
    SKIP_WS(p, end);
    if (p >= end || *p != ':') return NULL;
    p++;
    SKIP_WS(p, end);
    return p < end ? p : NULL;
}

/* after a member's value at *pp: 1 and *pp at the next member (a ','), 0 and *pp past the
   object or array (its ``close``: '}' or ']'), -1 for invalid JSON */
static int next_member(const char **pp, const char *end, char close) {
    const char *p = *pp;
    SKIP_WS(p, end);
    if (p >= end) return -1;
    if (*p == ',') {
        p++;
        SKIP_WS(p, end);
        *pp = p;
        return 1;
    }
    if (*p != close) return -1;
    *pp = p + 1;
    return 0;
}

/* skip one JSON value; NULL if not valid JSON (or too deep) */
static const char *skip_value(const char *p, const char *end, int depth, int *flags) {
    if (p >= end) return NULL;
    switch (*p) {
        case '"': {
            const char *q = scan_string(p + 1, end, flags);
            return q ? q + 1 : NULL;
        }
        case '{':
        case '[': {
            char close = *p == '{' ? '}' : ']';
            int obj = *p == '{';
            if (depth >= MAX_DEPTH) return NULL;
            p++;
            SKIP_WS(p, end);
            if (p < end && *p == close) return p + 1;
            for (;;) {
                if (obj) {
                    const char *k;
                    Py_ssize_t klen;
                    int kf;
                    p = read_key(p, end, &k, &klen, &kf);
                    if (!p) return NULL;
                    *flags |= kf;
                }
                p = skip_value(p, end, depth + 1, flags);
                if (!p) return NULL;
                int more = next_member(&p, end, close);
                if (more < 0) return NULL;
                if (!more) return p;
            }
        }
        case 't':
            return after_literal(p, end, "true", 4);
        case 'f':
            return after_literal(p, end, "false", 5);
        case 'n':
            return after_literal(p, end, "null", 4);
        default:
            return skip_number(p, end);
    }
}

/* -- interning ------------------------------------------------------------------------- */
/* The hash: 16 bytes per 64x64->128-bit multiply folded (as wyhash), with three 64-bit keys
   drawn per Scanner from os.urandom mixed into every block, so no input word can cancel a key
   it does not know: names cannot be crafted to collide without the keys. */
static inline uint64_t mix(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
    uint64_t ha = a >> 32, la = (uint32_t)a, hb = b >> 32, lb = (uint32_t)b;
    uint64_t hh = ha * hb, hl = ha * lb, lh = la * hb, ll = la * lb;
    uint64_t mid = (ll >> 32) + (uint32_t)hl + (uint32_t)lh;
    uint64_t lo = (mid << 32) | (uint32_t)ll, hi = hh + (hl >> 32) + (lh >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

static inline uint64_t rd64(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t rd32(const char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t hash_bytes(const uint64_t *key, const char *p, Py_ssize_t n) {
    uint64_t h = key[0] ^ (uint64_t)n, a, b;
    if (n <= 16) {
        if (n >= 8) {
            a = rd64(p);
            b = rd64(p + n - 8);
        } else if (n >= 4) {
            a = rd32(p);
            b = rd32(p + n - 4);
        } else if (n > 0) {
            a = ((uint64_t)(unsigned char)p[0] << 16) | ((uint64_t)(unsigned char)p[n >> 1] << 8) |
                (unsigned char)p[n - 1];
            b = 0;
        } else {
            a = b = 0;
        }
    } else {
        Py_ssize_t i = n;
        for (; i > 16; i -= 16, p += 16) h = mix(rd64(p) ^ key[1], rd64(p + 8) ^ h);
        a = rd64(p + i - 16);
        b = rd64(p + i - 8);
    }
    return mix(mix(a ^ key[1], b ^ h) ^ key[2], (uint64_t)n ^ key[1]);
}

static int tab_grow(Scanner *s) {
    size_t cap = s->tab_cap ? s->tab_cap * 2 : 1024;
    if (cap < s->tab_cap || cap > (size_t)PY_SSIZE_T_MAX / sizeof(Entry)) {
        PyErr_NoMemory();
        return -1;
    }
    Entry *t = PyMem_Malloc(cap * sizeof(Entry));
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < cap; i++) t[i].len = -1;
    for (size_t i = 0; i < s->tab_cap; i++) {
        if (s->tab[i].len < 0) continue;
        size_t j = s->tab[i].h & (cap - 1);
        while (t[j].len >= 0) j = (j + 1) & (cap - 1);
        t[j] = s->tab[i];
    }
    PyMem_Free(s->tab);
    s->tab = t;
    s->tab_cap = cap;
    return 0;
}

static int cleared(Scanner *s) {
    if (s->strings && s->codes) return 0;
    PyErr_SetString(PyExc_RuntimeError, "this Scanner was cleared by the garbage collector");
    return 1;
}

/* the code the dict holds for a string: an int in [0, len(strings)), checked (the dict is
   reachable from Python only through gc.get_referents, but is never trusted) */
static Py_ssize_t checked_code(Scanner *s, PyObject *v) {
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "a Scanner code must be an int, not %.200s", Py_TYPE(v)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long c = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (c == -1 && PyErr_Occurred()) return -1;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "a Scanner code beyond int64");
        return -1;
    }
    if (c < 0 || c >= PyList_GET_SIZE(s->strings) || c > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "a Scanner code out of range: %lld (%zd strings)", c,
                     PyList_GET_SIZE(s->strings));
        return -1;
    }
    return (Py_ssize_t)c;
}

/* the code of str (an exact str), interned now if new: appended to the list, then entered in
   the dict, and the append undone if that fails, so a failure leaves both as they were; -1:
   error set */
static Py_ssize_t intern_str(Scanner *s, PyObject *str) {
    if (cleared(s)) return -1;
    PyObject *got = PyDict_GetItemWithError(s->codes, str);
    if (got) {
        Py_INCREF(got);
        Py_ssize_t c = checked_code(s, got);
        Py_DECREF(got);
        return c;
    }
    if (PyErr_Occurred()) return -1;
    PyObject *strings = s->strings, *codes = s->codes;
    Py_ssize_t k = PyList_GET_SIZE(strings);
    if (k >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many distinct names");
        return -1;
    }
    PyObject *num = PyLong_FromSsize_t(k);
    if (!num) return -1;
    if (PyList_Append(strings, str) < 0) {
        Py_DECREF(num);
        return -1;
    }
    Py_INCREF(strings);
    Py_INCREF(codes);
    int rc = PyDict_SetItem(codes, str, num);
    Py_DECREF(num);
    if (rc < 0 && PyList_GET_SIZE(strings) > k && PyList_GET_ITEM(strings, k) == str) {
        /* undo the append without allocating (cannot fail): shift the items after it down */
        Py_ssize_t m = PyList_GET_SIZE(strings);
        for (Py_ssize_t i = k; i + 1 < m; i++) PyList_SET_ITEM(strings, i, PyList_GET_ITEM(strings, i + 1));
        Py_SET_SIZE(strings, m - 1);
        Py_DECREF(str);
    }
    Py_DECREF(strings);
    Py_DECREF(codes);
    return rc < 0 ? -1 : k;
}

/* the code of the string p[0:n] (ASCII or UTF-8, no escapes); -2: not valid UTF-8; -1: error set */
static int32_t intern(Scanner *s, const char *p, Py_ssize_t n) {
    if (s->tab_n + 1 > s->tab_cap / 2 && tab_grow(s) < 0) return -1;
    uint64_t h = hash_bytes(s->key, p, n);
    size_t mask = s->tab_cap - 1, j = h & mask;
    for (;;) {
        Entry *e = &s->tab[j];
        if (e->len < 0) break;
        if (e->h == h && e->len == n && memcmp(s->arena.p + e->off, p, (size_t)n) == 0) return e->code;
        j = (j + 1) & mask;
    }
    if (n > INT32_MAX) return -2;
    if (buf_reserve(&s->arena, n) < 0) return -1; /* before the string is entered: nothing to undo */
    PyObject *str = PyUnicode_DecodeUTF8(p, n, NULL);
    if (!str) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1; /* MemoryError: raised */
        PyErr_Clear();
        return -2;
    }
    Py_ssize_t code = intern_str(s, str);
    Py_DECREF(str);
    if (code < 0) return -1;
    /* the slot found above is still free: nothing run since touches the table or the arena
       (Python code can only intern through the views, which write the list and the dict) */
    memcpy(s->arena.p + s->arena.n, p, (size_t)n);
    Entry *e = &s->tab[j];
    e->h = h;
    e->off = s->arena.n;
    e->len = (int32_t)n;
    e->code = (int32_t)code;
    s->arena.n += n;
    s->tab_n++;
    return (int32_t)code;
}

/* -- one event ------------------------------------------------------------------------- */
#define SET(col, type, v) (((type *)(s->cols[col].p))[rec] = (v))

static int aux_add(Scanner *s, Py_ssize_t rec, int field, Py_ssize_t a, Py_ssize_t b) {
    if (buf_reserve(&s->aux, 32) < 0) return -1;
    int64_t *q = (int64_t *)(s->aux.p + s->aux.n);
    q[0] = rec;
    q[1] = field;
    q[2] = a;
    q[3] = b;
    s->aux.n += 32;
    return 0;
}

/* a number argument at p: *kind 0 (a number, in *num), 1 (null) or 2 (another value, skipped: the
   event goes to msgspec); NULL: invalid JSON */
static const char *num_arg(const char *p, const char *end, Num *num, int *kind, int *fallback, int *flags) {
    if (*p == 'n') {
        *kind = 1;
        return after_literal(p, end, "null", 4);
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        *kind = 0;
        return parse_number(p, end, num);
    }
    *kind = 2;
    *fallback = 1; /* a string ("0x7"), or a value of the wrong type: msgspec's call */
    return skip_value(p, end, 1, flags);
}

/* an integer argument (int | str | None): NOVAL for null; an event msgspec must read sets *fallback */
static const char *int_arg(const char *p, const char *end, int64_t *out, int *fallback, int *flags) {
    Num num;
    int kind;
    const char *q = num_arg(p, end, &num, &kind, fallback, flags);
    if (q && kind == 1) *out = NOVAL;
    if (q && kind == 0) {
        if (num.is_int && num.ival != INT64_MIN)
            *out = num.ival;
        else
            *fallback = 1;
    }
    return q;
}

/* a string value at p ('"'): its interned code in *out, or *fallback (escapes, or a string
   the table does not take: msgspec's call); NULL: invalid JSON, or an error (*err) */
static const char *str_code(Scanner *s, const char *p, const char *end, int32_t *out, int *fallback, int *err) {
    int f = 0;
    const char *q = scan_string(p + 1, end, &f);
    if (!q) return NULL;
    if (f & S_ESC) {
        *fallback = 1;
        return q + 1;
    }
    int32_t code = intern(s, p + 1, q - p - 1);
    if (code == -1) {
        *err = 1;
        return NULL;
    }
    if (code == -2)
        *fallback = 1;
    else
        *out = code;
    return q + 1;
}

/* an id (pid/tid: int | str | None) */
static const char *id_arg(Scanner *s, const char *p, const char *end, int64_t *out, int *is_str, int *fallback,
                          int *flags, int *err) {
    if (*p == '"') {
        int32_t code = -1;
        const char *q = str_code(s, p, end, &code, fallback, err);
        if (q && code >= 0) {
            *out = code;
            *is_str = 1;
        }
        return q;
    }
    const char *q = int_arg(p, end, out, fallback, flags);
    if (q && *out == NOVAL) *out = -1;
    return q;
}

static const char *float_arg(const char *p, const char *end, double *out, int *fallback, int *flags) {
    Num num;
    int kind;
    const char *q = num_arg(p, end, &num, &kind, fallback, flags);
    if (q && kind == 1) *out = NAN;
    if (q && kind == 0) {
        if (num.float_ok)
            *out = num.dval;
        else
            *fallback = 1;
    }
    return q;
}

/* a string field (str, or str | None with nullable): its code */
static const char *str_arg(Scanner *s, const char *p, const char *end, int nullable, int32_t *out, int *fallback,
                           int *flags, int *err) {
    if (*p == '"') return str_code(s, p, end, out, fallback, err);
    if (nullable && *p == 'n') {
        p = after_literal(p, end, "null", 4);
        if (p) *out = -1;
        return p;
    }
    *fallback = 1;
    return skip_value(p, end, 1, flags);
}

#define KEYIS(lit) (klen == (Py_ssize_t)sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)

/* the args object of an event, at p ('{'); NULL: invalid JSON or error */
static const char *parse_args(Scanner *s, const char *base, const char *p, const char *end, Py_ssize_t rec,
                              int *fallback, int *flags, int *err) {
    unsigned seen = 0;
    p++;
    SKIP_WS(p, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        const char *k;
        Py_ssize_t klen;
        int kf;
        p = read_key(p, end, &k, &klen, &kf);
        if (!p) return NULL;
        if (kf) { /* an escaped or non-ASCII key might name a field */
            *fallback = 1;
            p = skip_value(p, end, 2, flags);
        } else {
            int col = -1, bit = 0, aux = -1, rare = 0;
            switch (klen) {
                case 4:
                    if (KEYIS("kind")) aux = AUX_KIND, bit = 1 << 6;
                    else if (KEYIS("size")) rare = 1;
                    break;
                case 5:
                    if (KEYIS("bytes")) aux = AUX_BYTES, bit = 1 << 11;
                    else if (KEYIS("dtype") || KEYIS("Bytes")) rare = 1;
                    break;
                case 6:
                    if (KEYIS("stream")) col = C_STREAM, bit = 1 << 0;
                    else if (KEYIS("device")) col = C_DEV, bit = 1 << 1;
                    break;
                case 10:
                    if (KEYIS("Input Dims")) aux = AUX_DIMS, bit = 1 << 7;
                    else if (KEYIS("Input type")) aux = AUX_TYPE, bit = 1 << 8;
                    break;
                case 11:
                    if (KEYIS("correlation")) col = C_CORR, bit = 1 << 2;
                    else if (KEYIS("External id")) col = C_EXT, bit = 1 << 3;
                    else if (KEYIS("external id")) col = C_EXT_OLD, bit = 1 << 4;
                    break;
                case 13:
                    if (KEYIS("Input Strides")) aux = AUX_STRIDES, bit = 1 << 9;
                    break;
                case 15:
                    if (KEYIS("Sequence number")) col = C_SEQ, bit = 1 << 5;
                    else if (KEYIS("Collective name") || KEYIS("Total Allocated") || KEYIS("Concrete Inputs")) {
                        if (KEYIS("Concrete Inputs")) aux = AUX_CONCRETE, bit = 1 << 10;
                        else rare = 1;
                    }
                    break;
                default:
                    if (KEYIS("In msg nelems") || KEYIS("Out msg nelems") || KEYIS("Group size") ||
                        KEYIS("Process Group Name") || KEYIS("Process Group Ranks") || KEYIS("Seq") ||
                        KEYIS("direction") || KEYIS("Total Reserved") || KEYIS("Device Id") ||
                        KEYIS("Device Type") || KEYIS("Addr"))
                        rare = 1;
            }
            if (bit) {
                if (seen & bit) *fallback = 1; /* a duplicate key: msgspec's call */
                seen |= bit;
            }
            if (col >= 0) {
                int64_t v = NOVAL;
                p = int_arg(p, end, &v, fallback, flags);
                if (p) SET(col, int64_t, v == NOVAL ? arg_default[col] : v);
            } else if (aux == AUX_KIND) {
                if (*p == '"') {
                    int f = 0;
                    const char *e = scan_string(p + 1, end, &f);
                    if (!e) return NULL;
                    if (f) *fallback = 1;
                    else if (aux_add(s, rec, AUX_KIND, p + 1 - base, e - base) < 0) {
                        *err = 1;
                        return NULL;
                    }
                    p = e + 1;
                } else if (*p == 'n') {
                    p = after_literal(p, end, "null", 4);
                } else {
                    *fallback = 1;
                    p = skip_value(p, end, 2, flags);
                }
            } else if (aux == AUX_BYTES) { /* a copy's size: an int64 here, anything else msgspec's */
                int64_t v = NOVAL;
                p = int_arg(p, end, &v, fallback, flags);
                if (p && v != NOVAL && aux_add(s, rec, AUX_BYTES, v, 0) < 0) {
                    *err = 1;
                    return NULL;
                }
            } else if (aux >= 0) {
                const char *v = p;
                p = skip_value(p, end, 2, flags);
                if (p && aux_add(s, rec, aux, v - base, p - base) < 0) {
                    *err = 1;
                    return NULL;
                }
            } else {
                if (rare) *fallback = 1;
                p = skip_value(p, end, 2, flags);
            }
        }
        if (!p) return NULL;
        int more = next_member(&p, end, '}');
        if (more < 0) return NULL;
        if (!more) return p;
    }
}

/* one element of the events array at p; returns its end, NULL on invalid JSON (err: exception) */
static const char *parse_event(Scanner *s, const char *base, const char *p, const char *end, int *err) {
    Py_ssize_t rec = s->cols[C_CAT].n / 4;
    Py_ssize_t aux_n = s->aux.n;
    const char *start = p;
    int fallback = 0, flags = 0, is_x = 0, is_i = 0;
    const char *name_p = NULL;
    Py_ssize_t name_n = 0;
    unsigned seen = 0;
    for (int c = 0; c < N_COLS; c++)
        if (buf_reserve(&s->cols[c], col_size[c]) < 0) {
            *err = 1;
            return NULL;
        }
    ((uint8_t *)s->cols[C_FLAGS].p)[rec] = 0;
    SET(C_CAT, int32_t, -1);
    SET(C_NAME, int32_t, -1);
    SET(C_PID, int64_t, -1);
    SET(C_TID, int64_t, -1);
    SET(C_TS, double, NAN);
    SET(C_DUR, double, NAN);
    for (int c = C_CORR; c <= C_STREAM; c++) SET(c, int64_t, arg_default[c]);
    if (*p != '{') { /* not an object: msgspec names the problem */
        p = skip_value(p, end, 1, &flags);
        if (!p) return NULL;
        fallback = 1;
        goto done;
    }
    p++;
    SKIP_WS(p, end);
    if (p < end && *p == '}') {
        p++;
        goto done;
    }
    for (;;) {
        const char *k;
        Py_ssize_t klen;
        int kf;
        p = read_key(p, end, &k, &klen, &kf);
        if (!p) return NULL;
        int field = -1;
        if (kf) {
            fallback = 1;
        } else if (klen == 2) {
            if (k[0] == 'p' && k[1] == 'h') field = 0;
            else if (k[0] == 't' && k[1] == 's') field = 5;
        } else if (klen == 3) {
            if (KEYIS("cat")) field = 1;
            else if (KEYIS("pid")) field = 3;
            else if (KEYIS("tid")) field = 4;
            else if (KEYIS("dur")) field = 6;
        } else if (klen == 4) {
            if (KEYIS("name")) field = 2;
            else if (KEYIS("args")) field = 7;
        }
        if (field >= 0) {
            if (seen & (1u << field)) fallback = 1;
            seen |= 1u << field;
        }
        switch (field) {
            case 0: /* ph: str */
                if (*p == '"') {
                    int f = 0;
                    const char *e = scan_string(p + 1, end, &f);
                    if (!e) return NULL;
                    if (f) fallback = 1;
                    is_x = e - p - 1 == 1 && p[1] == 'X';
                    is_i = e - p - 1 == 1 && p[1] == 'i';
                    p = e + 1;
                } else {
                    fallback = 1;
                    p = skip_value(p, end, 1, &flags);
                }
                break;
            case 1: {
                int32_t code = -1;
                p = str_arg(s, p, end, 1, &code, &fallback, &flags, err);
                SET(C_CAT, int32_t, code);
                break;
            }
            case 2: {
                int32_t code = -1;
                if (*p == '"') {
                    name_p = p + 1;
                }
                p = str_arg(s, p, end, 0, &code, &fallback, &flags, err);
                if (p && name_p) name_n = p - 1 - name_p;
                SET(C_NAME, int32_t, code);
                break;
            }
            case 3:
            case 4: {
                int64_t v = -1;
                int is_str = 0;
                p = id_arg(s, p, end, &v, &is_str, &fallback, &flags, err);
                if (p) {
                    SET(field == 3 ? C_PID : C_TID, int64_t, v);
                    if (is_str) ((uint8_t *)s->cols[C_FLAGS].p)[rec] |= field == 3 ? F_PID_STR : F_TID_STR;
                }
                break;
            }
            case 5:
            case 6: {
                double v = NAN;
                p = float_arg(p, end, &v, &fallback, &flags);
                if (p) SET(field == 5 ? C_TS : C_DUR, double, v);
                break;
            }
            case 7:
                if (*p == '{') {
                    p = parse_args(s, base, p, end, rec, &fallback, &flags, err);
                } else if (*p == 'n') {
                    p = after_literal(p, end, "null", 4);
                } else {
                    fallback = 1;
                    p = skip_value(p, end, 1, &flags);
                }
                break;
            default:
                p = skip_value(p, end, 1, &flags);
        }
        if (!p) return NULL;
        int more = next_member(&p, end, '}');
        if (more < 0) return NULL;
        if (!more) break;
    }
done:
    if (flags & (S_HIGH | S_UESC)) fallback = 1; /* UTF-8 and \u escapes outside the names: msgspec's call */
    if (!fallback && is_i && name_n == 8 && memcmp(name_p, "[memory]", 8) == 0) fallback = 1;
    if (fallback) {
        s->aux.n = aux_n;
        if (buf_reserve(&s->fb, 24) < 0) {
            *err = 1;
            return NULL;
        }
        int64_t *t = (int64_t *)(s->fb.p + s->fb.n);
        t[0] = rec;
        t[1] = start - base;
        t[2] = p - base;
        s->fb.n += 24;
    } else if (!is_x) {
        s->aux.n = aux_n; /* not kept */
        return p;
    }
    for (int c = 0; c < N_COLS; c++) s->cols[c].n += col_size[c];
    return p;
}

static void reset(Scanner *s) {
    for (int c = 0; c < N_COLS; c++) s->cols[c].n = 0;
    s->fb.n = s->aux.n = 0;
}

/* the columns of one block (the events array text), or None (see the top of this file) */
static PyObject *scan_block(Scanner *s, const char *base, Py_ssize_t len) {
    const char *p = base, *end = base + len;
    int err = 0;
    reset(s);
    SKIP_WS(p, end);
    if (p >= end || *p != '[') Py_RETURN_NONE;
    p++;
    SKIP_WS(p, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p >= end) Py_RETURN_NONE;
            p = parse_event(s, base, p, end, &err);
            if (!p) {
                if (err) return NULL;
                Py_RETURN_NONE;
            }
            SKIP_WS(p, end);
            if (p >= end) Py_RETURN_NONE;
            if (*p == ',') {
                p++;
                SKIP_WS(p, end);
                continue;
            }
            if (*p == ']') {
                p++;
                break;
            }
            Py_RETURN_NONE;
        }
    }
    SKIP_WS(p, end);
    if (p != end) Py_RETURN_NONE;
    Py_ssize_t n = s->cols[C_CAT].n / 4;
    PyObject *out = PyTuple_New(N_COLS + 3);
    if (!out) return NULL;
    PyTuple_SET_ITEM(out, 0, PyLong_FromSsize_t(n));
    for (int c = 0; c < N_COLS; c++) /* bytearrays: numpy views of them are writable */
        PyTuple_SET_ITEM(out, c + 1, PyByteArray_FromStringAndSize(s->cols[c].p, s->cols[c].n));
    PyTuple_SET_ITEM(out, N_COLS + 1, PyBytes_FromStringAndSize(s->fb.p, s->fb.n));
    PyTuple_SET_ITEM(out, N_COLS + 2, PyBytes_FromStringAndSize(s->aux.p, s->aux.n));
    for (int i = 0; i < N_COLS + 3; i++)
        if (!PyTuple_GET_ITEM(out, i)) {
            Py_DECREF(out);
            return NULL;
        }
    return out;
}

/* scan(buffer) -> None | (n, cat, name, pid, tid, flags, ts, dur, corr, ext, ext_old, seq, dev, stream, fb, aux) */
static PyObject *Scanner_scan(Scanner *s, PyObject *arg) {
    if (s->busy) { /* re-entered (a finaliser run mid-scan): the buffers are in use */
        PyErr_SetString(PyExc_RuntimeError, "Scanner.scan is already running on this Scanner");
        return NULL;
    }
    if (cleared(s)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    s->busy = 1;
    PyObject *out = scan_block(s, view.buf, view.len);
    s->busy = 0;
    PyBuffer_Release(&view);
    return out;
}

/* _hash(b) -> int: this Scanner's hash of the bytes b (for the tests: the keys differ by Scanner) */
static PyObject *Scanner_hash(Scanner *s, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint64_t h = hash_bytes(s->key, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *Scanner_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)args;
    (void)kw;
    PyObject *os = PyImport_ImportModule("os");
    if (!os) return NULL;
    PyObject *rnd = PyObject_CallMethod(os, "urandom", "n", (Py_ssize_t)sizeof(((Scanner *)0)->key));
    Py_DECREF(os);
    if (!rnd) return NULL;
    if (!PyBytes_Check(rnd) || PyBytes_GET_SIZE(rnd) != (Py_ssize_t)sizeof(((Scanner *)0)->key)) {
        Py_DECREF(rnd);
        PyErr_SetString(PyExc_RuntimeError, "os.urandom gave no key");
        return NULL;
    }
    Scanner *s = (Scanner *)type->tp_alloc(type, 0); /* zeroed: no buffer, no table yet */
    if (!s) {
        Py_DECREF(rnd);
        return NULL;
    }
    memcpy(s->key, PyBytes_AS_STRING(rnd), sizeof(s->key));
    Py_DECREF(rnd);
    s->strings = PyList_New(0);
    s->codes = PyDict_New();
    if (!s->strings || !s->codes || tab_grow(s) < 0) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, ":Scanner", kwlist)) return -1;
    if (s->inited) { /* the codes handed out must keep their strings: no reset */
        PyErr_SetString(PyExc_RuntimeError, "Scanner cannot be re-initialised");
        return -1;
    }
    s->inited = 1;
    return 0;
}

static int Scanner_traverse(Scanner *s, visitproc visit, void *arg) {
    Py_VISIT(s->strings);
    Py_VISIT(s->codes);
    return 0;
}

static int Scanner_clear(Scanner *s) {
    Py_CLEAR(s->strings);
    Py_CLEAR(s->codes);
    return 0;
}

static void Scanner_dealloc(Scanner *s) {
    PyObject_GC_UnTrack(s);
    Scanner_clear(s);
    PyMem_Free(s->tab);
    PyMem_Free(s->arena.p);
    for (int c = 0; c < N_COLS; c++) PyMem_Free(s->cols[c].p);
    PyMem_Free(s->fb.p);
    PyMem_Free(s->aux.p);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *no_pickle(PyObject *self, PyObject *unused) {
    (void)unused;
    PyErr_Format(PyExc_TypeError, "cannot pickle '%.200s' object", Py_TYPE(self)->tp_name);
    return NULL;
}

/* -- the views of the interned strings ---------------------------------------------------- */
/* ScannerStrings (code -> str) and ScannerCodes (str -> code): read-only views of the scanner's
   list and dict; their only writes (strings.append(s), codes[s] = code) intern s through the
   scanner (the same code as the scanner's own interning; an append of a string already
   interned does nothing, codes[s] = v requires v to be the code s gets). */
typedef struct {
    PyObject_HEAD
    Scanner *scanner;
} View;

static PyTypeObject StringsType, CodesType;

static PyObject *view_new(PyTypeObject *type, Scanner *s) {
    if (cleared(s)) return NULL;
    View *v = PyObject_GC_New(View, type);
    if (!v) return NULL;
    Py_INCREF(s);
    v->scanner = s;
    PyObject_GC_Track(v);
    return (PyObject *)v;
}

static int view_traverse(View *v, visitproc visit, void *arg) {
    Py_VISIT(v->scanner);
    return 0;
}

static int view_clear(View *v) {
    Py_CLEAR(v->scanner);
    return 0;
}

static void view_dealloc(View *v) {
    PyObject_GC_UnTrack(v);
    view_clear(v);
    PyObject_GC_Del(v);
}

/* the view's container (borrowed); NULL: error set */
static PyObject *view_target(View *v) {
    if (!v->scanner) {
        PyErr_SetString(PyExc_RuntimeError, "this view was cleared by the garbage collector");
        return NULL;
    }
    if (cleared(v->scanner)) return NULL;
    return Py_IS_TYPE(v, &StringsType) ? v->scanner->strings : v->scanner->codes;
}

/* a str to intern: an exact str (a subclass is copied to one, never its own __hash__/__eq__) */
static PyObject *exact_str(PyObject *o) {
    if (PyUnicode_CheckExact(o)) {
        Py_INCREF(o);
        return o;
    }
    if (PyUnicode_Check(o)) return PyUnicode_FromObject(o);
    PyErr_Format(PyExc_TypeError, "a Scanner interns str, not %.200s", Py_TYPE(o)->tp_name);
    return NULL;
}

static Py_ssize_t intern_obj(Scanner *s, PyObject *o) {
    PyObject *str = exact_str(o);
    if (!str) return -1;
    Py_ssize_t code = intern_str(s, str);
    Py_DECREF(str);
    return code;
}

static PyObject *Scanner_intern(Scanner *s, PyObject *arg) {
    Py_ssize_t code = intern_obj(s, arg);
    return code < 0 ? NULL : PyLong_FromSsize_t(code);
}

static Py_ssize_t view_len(View *v) {
    PyObject *t = view_target(v);
    return t ? PyObject_Length(t) : -1;
}

static PyObject *view_getitem(View *v, PyObject *key) {
    PyObject *t = view_target(v);
    return t ? PyObject_GetItem(t, key) : NULL;
}

static PyObject *strings_item(View *v, Py_ssize_t i) {
    PyObject *t = view_target(v);
    if (!t) return NULL;
    if (i < 0 || i >= PyList_GET_SIZE(t)) { /* sq_item: a negative index was already offset */
        PyErr_SetString(PyExc_IndexError, "ScannerStrings index out of range");
        return NULL;
    }
    PyObject *o = PyList_GET_ITEM(t, i);
    Py_INCREF(o);
    return o;
}

/* strings[i]: an int at list speed (kineto looks up a block's names by code), a slice a list */
static PyObject *strings_subscript(View *v, PyObject *key) {
    if (PyLong_CheckExact(key)) {
        PyObject *t = view_target(v);
        if (!t) return NULL;
        Py_ssize_t i = PyLong_AsSsize_t(key);
        if (i == -1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return NULL;
            PyErr_Clear();
            PyErr_SetString(PyExc_IndexError, "ScannerStrings index out of range");
            return NULL;
        }
        if (i < 0) i += PyList_GET_SIZE(t);
        return strings_item(v, i);
    }
    return view_getitem(v, key);
}

static int view_contains(View *v, PyObject *key) {
    PyObject *t = view_target(v);
    return t ? PySequence_Contains(t, key) : -1;
}

static PyObject *view_iter(View *v) {
    PyObject *t = view_target(v);
    return t ? PyObject_GetIter(t) : NULL;
}

static PyObject *view_repr(View *v) {
    PyObject *t = view_target(v);
    if (!t) return NULL;
    return PyUnicode_FromFormat("%s(%R)", Py_IS_TYPE(v, &StringsType) ? "ScannerStrings" : "ScannerCodes", t);
}

static PyObject *view_richcompare(View *v, PyObject *other, int op) {
    PyObject *t = view_target(v);
    if (!t) return NULL;
    if (Py_IS_TYPE(other, Py_TYPE(v))) {
        other = view_target((View *)other);
        if (!other) return NULL;
    }
    return PyObject_RichCompare(t, other, op);
}

static PyObject *view_copy(View *v, PyObject *unused) {
    (void)unused;
    PyObject *t = view_target(v);
    if (!t) return NULL;
    return Py_IS_TYPE(v, &StringsType) ? PyList_GetSlice(t, 0, PyList_GET_SIZE(t)) : PyDict_Copy(t);
}

static PyObject *strings_append(View *v, PyObject *arg) {
    if (!view_target(v)) return NULL;
    if (intern_obj(v->scanner, arg) < 0) return NULL;
    Py_RETURN_NONE;
}

static int codes_setitem(View *v, PyObject *key, PyObject *value) {
    if (!view_target(v)) return -1;
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "a Scanner's codes cannot be deleted");
        return -1;
    }
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "a Scanner code must be an int, not %.200s", Py_TYPE(value)->tp_name);
        return -1;
    }
    Scanner *s = v->scanner;
    Py_INCREF(s);
    int rc = -1;
    PyObject *str = exact_str(key);
    if (!str) goto done;
    /* the code str gets (now or already) must be the value: check before interning */
    PyObject *got = PyDict_GetItemWithError(s->codes, str);
    Py_ssize_t want;
    if (got) {
        Py_INCREF(got);
        want = checked_code(s, got);
        Py_DECREF(got);
    } else {
        want = PyErr_Occurred() ? -1 : PyList_GET_SIZE(s->strings);
    }
    if (want >= 0) {
        int eq = -1;
        PyObject *w = PyLong_FromSsize_t(want);
        if (w) {
            eq = PyObject_RichCompareBool(value, w, Py_EQ);
            Py_DECREF(w);
        }
        if (eq == 0)
            PyErr_Format(PyExc_ValueError, "the Scanner's code of %R is %zd, not %R", str, want, value);
        else if (eq == 1 && intern_str(s, str) == want)
            rc = 0;
        else if (eq == 1 && !PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the Scanner's strings changed while interning");
    }
    Py_DECREF(str);
done:
    Py_DECREF(s);
    return rc;
}

static PyObject *codes_get(View *v, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "get expected 1 or 2 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *t = view_target(v);
    if (!t) return NULL;
    PyObject *got = PyDict_GetItemWithError(t, args[0]);
    if (!got) {
        if (PyErr_Occurred()) return NULL;
        got = nargs == 2 ? args[1] : Py_None;
    }
    Py_INCREF(got);
    return got;
}

static PyObject *codes_call(View *v, const char *name) {
    PyObject *t = view_target(v);
    return t ? PyObject_CallMethod(t, name, NULL) : NULL;
}

static PyObject *codes_keys(View *v, PyObject *unused) {
    (void)unused;
    return codes_call(v, "keys");
}

static PyObject *codes_values(View *v, PyObject *unused) {
    (void)unused;
    return codes_call(v, "values");
}

static PyObject *codes_items(View *v, PyObject *unused) {
    (void)unused;
    return codes_call(v, "items");
}

static PyMethodDef strings_methods[] = {
    {"append", (PyCFunction)strings_append, METH_O, "append(s): intern s (nothing if it already is)"},
    {"copy", (PyCFunction)view_copy, METH_NOARGS, "copy() -> a list of the strings, by code"},
    {"__reduce__", no_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef codes_methods[] = {
    {"get", (PyCFunction)(void (*)(void))codes_get, METH_FASTCALL, "get(s, default=None) -> the code of s, or default"},
    {"keys", (PyCFunction)codes_keys, METH_NOARGS, "the interned strings"},
    {"values", (PyCFunction)codes_values, METH_NOARGS, "their codes"},
    {"items", (PyCFunction)codes_items, METH_NOARGS, "(string, code) pairs"},
    {"copy", (PyCFunction)view_copy, METH_NOARGS, "copy() -> a dict of the codes"},
    {"__reduce__", no_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods strings_as_sequence = {
    .sq_length = (lenfunc)view_len,
    .sq_item = (ssizeargfunc)strings_item,
    .sq_contains = (objobjproc)view_contains,
};

static PyMappingMethods strings_as_mapping = {
    .mp_length = (lenfunc)view_len,
    .mp_subscript = (binaryfunc)strings_subscript,
};

static PySequenceMethods codes_as_sequence = {
    .sq_contains = (objobjproc)view_contains,
};

static PyMappingMethods codes_as_mapping = {
    .mp_length = (lenfunc)view_len,
    .mp_subscript = (binaryfunc)view_getitem,
    .mp_ass_subscript = (objobjargproc)codes_setitem,
};

static PyTypeObject StringsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrace.readers._scan.ScannerStrings",
    .tp_basicsize = sizeof(View),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The strings a Scanner interned, by code (a read-only view; append(s) interns s)",
    .tp_dealloc = (destructor)view_dealloc,
    .tp_traverse = (traverseproc)view_traverse,
    .tp_clear = (inquiry)view_clear,
    .tp_repr = (reprfunc)view_repr,
    .tp_as_sequence = &strings_as_sequence,
    .tp_as_mapping = &strings_as_mapping,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_richcompare = (richcmpfunc)view_richcompare,
    .tp_iter = (getiterfunc)view_iter,
    .tp_methods = strings_methods,
};

static PyTypeObject CodesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrace.readers._scan.ScannerCodes",
    .tp_basicsize = sizeof(View),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The code of each string a Scanner interned (a read-only view; codes[s] = code interns s)",
    .tp_dealloc = (destructor)view_dealloc,
    .tp_traverse = (traverseproc)view_traverse,
    .tp_clear = (inquiry)view_clear,
    .tp_repr = (reprfunc)view_repr,
    .tp_as_sequence = &codes_as_sequence,
    .tp_as_mapping = &codes_as_mapping,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_richcompare = (richcmpfunc)view_richcompare,
    .tp_iter = (getiterfunc)view_iter,
    .tp_methods = codes_methods,
};

static PyObject *Scanner_get_strings(Scanner *s, void *c) {
    (void)c;
    return view_new(&StringsType, s);
}

static PyObject *Scanner_get_codes(Scanner *s, void *c) {
    (void)c;
    return view_new(&CodesType, s);
}

/* -- module functions ----------------------------------------------------------------------- */
static inline int64_t rd_i64(const char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline int32_t rd_i32(const char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* join_spans(buffer, spans, sep) -> bytes: buffer[a:b] + sep for each (a, b) of spans (int64 pairs) */
static PyObject *join_spans(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer text, spans;
    int sep;
    if (!PyArg_ParseTuple(args, "y*y*i:join_spans", &text, &spans, &sep)) return NULL;
    PyObject *out = NULL;
    const char *sp = spans.buf;
    Py_ssize_t k = spans.len / 16, total = 0;
    if (spans.len % 16) {
        PyErr_SetString(PyExc_ValueError, "spans: int64 pairs expected");
        goto done;
    }
    if (sep < 0 || sep > 255) {
        PyErr_SetString(PyExc_ValueError, "sep: a byte (0 to 255) expected");
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        int64_t a = rd_i64(sp + 16 * i), b = rd_i64(sp + 16 * i + 8);
        if (a < 0 || b < a || b > (int64_t)text.len) {
            PyErr_SetString(PyExc_ValueError, "a span outside the buffer");
            goto done;
        }
        if ((Py_ssize_t)(b - a) >= PY_SSIZE_T_MAX - total) {
            PyErr_NoMemory();
            goto done;
        }
        total += (Py_ssize_t)(b - a) + 1;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *o = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t a = (Py_ssize_t)rd_i64(sp + 16 * i), n = (Py_ssize_t)rd_i64(sp + 16 * i + 8) - a;
        memcpy(o, (const char *)text.buf + a, (size_t)n);
        o += n;
        *o++ = (char)sep;
    }
done:
    PyBuffer_Release(&text);
    PyBuffer_Release(&spans);
    return out;
}

/* first_codes(codes, n) -> (local, dictionary): int32 codes (< n; negative: null) renumbered in
 * order of first occurrence (nulls stay -1), and the codes in that order. The table of codes
 * seen is sized by the largest code present, not by n (checked: no size wraps). */
static PyObject *first_codes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer codes;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*n:first_codes", &codes, &n)) return NULL;
    PyObject *local = NULL, *dict = NULL, *out = NULL;
    int32_t *seen = NULL;
    const char *c = codes.buf;
    Py_ssize_t k = codes.len / 4, m = 0;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "first_codes: n must be >= 0");
        goto done;
    }
    if (codes.len % 4) {
        PyErr_SetString(PyExc_ValueError, "first_codes: int32 codes expected");
        goto done;
    }
    int32_t top = -1;
    for (Py_ssize_t i = 0; i < k; i++) {
        int32_t x = rd_i32(c + 4 * i);
        if (x > top) top = x;
    }
    if (top >= n) {
        PyErr_SetString(PyExc_ValueError, "a code beyond the strings");
        goto done;
    }
    Py_ssize_t size = (Py_ssize_t)top + 1; /* <= 2**31 */
    Py_ssize_t ndict = size < k ? size : k;
    if (size > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(int32_t) || ndict > PY_SSIZE_T_MAX / 4) {
        PyErr_NoMemory();
        goto done;
    }
    seen = PyMem_Malloc((size_t)(size > 0 ? size : 1) * sizeof(int32_t));
    if (!seen) {
        PyErr_NoMemory();
        goto done;
    }
    local = PyByteArray_FromStringAndSize(NULL, codes.len);
    dict = PyByteArray_FromStringAndSize(NULL, ndict * 4);
    if (!local || !dict) goto done;
    for (Py_ssize_t i = 0; i < size; i++) seen[i] = -1;
    int32_t *l = (int32_t *)PyByteArray_AS_STRING(local), *d = (int32_t *)PyByteArray_AS_STRING(dict);
    for (Py_ssize_t i = 0; i < k; i++) {
        int32_t x = rd_i32(c + 4 * i);
        if (x < 0) {
            l[i] = -1;
            continue;
        }
        if (seen[x] < 0) {
            seen[x] = (int32_t)m;
            d[m++] = x;
        }
        l[i] = seen[x];
    }
    if (PyByteArray_Resize(dict, m * 4) < 0) goto done;
    out = PyTuple_Pack(2, local, dict);
done:
    PyMem_Free(seen);
    Py_XDECREF(local);
    Py_XDECREF(dict);
    PyBuffer_Release(&codes);
    return out;
}

static PyMethodDef module_methods[] = {
    {"first_codes", first_codes, METH_VARARGS,
     "first_codes(codes, n) -> (local, dictionary): int32 codes renumbered in order of first occurrence"},
    {"join_spans", join_spans, METH_VARARGS, "join_spans(buffer, spans, sep) -> the spans' bytes, each followed by sep"},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O,
     "scan(text) -> None or a tuple of columns: the events of a JSON array of Kineto events"},
    {"intern", (PyCFunction)Scanner_intern, METH_O, "intern(s) -> the code of the string s (interned now if new)"},
    {"_hash", (PyCFunction)Scanner_hash, METH_O, "_hash(b) -> this Scanner's (keyed) hash of the bytes b"},
    {"__reduce__", no_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"strings", (getter)Scanner_get_strings, NULL, "the interned strings, by code (a read-only view)", NULL},
    {"codes", (getter)Scanner_get_codes, NULL, "the code of each interned string (a read-only view)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrace.readers._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, /* not a base type */
    .tp_doc = "Scanner() - scans blocks of Kineto events into columns; strings interned across blocks",
    .tp_new = Scanner_new,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_traverse = (traverseproc)Scanner_traverse,
    .tp_clear = (inquiry)Scanner_clear,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Compiled scanner of Kineto events", -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&StringsType) < 0 || PyType_Ready(&CodesType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
