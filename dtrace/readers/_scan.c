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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

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

static int buf_reserve(Buf *b, Py_ssize_t add) {
    if (b->n + add <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + add) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

typedef struct {
    uint64_t h;
    Py_ssize_t off; /* of the key in the arena */
    int32_t len;    /* -1: empty slot */
    int32_t code;
} Entry;

typedef struct {
    PyObject_HEAD
    PyObject *strings; /* list: code -> str */
    PyObject *codes;   /* dict: str -> code */
    Entry *tab;
    size_t tab_cap, tab_n;
    Buf arena;
    Buf cols[N_COLS];
    Buf fb;  /* int64 triples: record, start, end (the events msgspec decodes) */
    Buf aux; /* int64 quads: record, field, start, end (argument texts) */
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
static uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) { /* 8 bytes at a time */
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001B3ULL;
    h ^= h >> 29;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 32);
}

static int tab_grow(Scanner *s) {
    size_t cap = s->tab_cap ? s->tab_cap * 2 : 1024;
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

/* the code of the string p[0:n] (ASCII or UTF-8, no escapes); -2: not valid UTF-8; -1: error set */
static int32_t intern(Scanner *s, const char *p, Py_ssize_t n) {
    if ((s->tab_n + 1) * 2 > s->tab_cap && tab_grow(s) < 0) return -1;
    uint64_t h = hash_bytes(p, n);
    size_t j = h & (s->tab_cap - 1);
    for (;;) {
        Entry *e = &s->tab[j];
        if (e->len < 0) break;
        if (e->h == h && e->len == n && memcmp(s->arena.p + e->off, p, (size_t)n) == 0) return e->code;
        j = (j + 1) & (s->tab_cap - 1);
    }
    if (n > INT32_MAX) return -2;
    PyObject *str = PyUnicode_DecodeUTF8(p, n, NULL);
    if (!str) {
        PyErr_Clear();
        return -2;
    }
    int32_t code;
    PyObject *got = PyDict_GetItemWithError(s->codes, str);
    if (got) {
        code = (int32_t)PyLong_AsLong(got);
    } else if (PyErr_Occurred()) {
        Py_DECREF(str);
        return -1;
    } else {
        Py_ssize_t k = PyList_GET_SIZE(s->strings);
        if (k >= INT32_MAX - 1) {
            Py_DECREF(str);
            PyErr_SetString(PyExc_OverflowError, "too many distinct names");
            return -1;
        }
        PyObject *num = PyLong_FromSsize_t(k);
        if (!num || PyDict_SetItem(s->codes, str, num) < 0 || PyList_Append(s->strings, str) < 0) {
            Py_XDECREF(num);
            Py_DECREF(str);
            return -1;
        }
        Py_DECREF(num);
        code = (int32_t)k;
    }
    Py_DECREF(str);
    if (buf_reserve(&s->arena, n) < 0) return -1;
    memcpy(s->arena.p + s->arena.n, p, (size_t)n);
    Entry *e = &s->tab[j];
    e->h = h;
    e->off = s->arena.n;
    e->len = (int32_t)n;
    e->code = code;
    s->arena.n += n;
    s->tab_n++;
    return code;
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

/* scan(buffer) -> None | (n, cat, name, pid, tid, flags, ts, dur, corr, ext, ext_old, seq, dev, stream, fb, aux) */
static PyObject *Scanner_scan(Scanner *s, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const char *base = view.buf;
    const char *p = base, *end = base + view.len;
    int err = 0;
    reset(s);
    SKIP_WS(p, end);
    if (p >= end || *p != '[') goto give_up;
    p++;
    SKIP_WS(p, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p >= end) goto give_up;
            p = parse_event(s, base, p, end, &err);
            if (!p) {
                if (err) goto error;
                goto give_up;
            }
            SKIP_WS(p, end);
            if (p >= end) goto give_up;
            if (*p == ',') {
                p++;
                SKIP_WS(p, end);
                continue;
            }
            if (*p == ']') {
                p++;
                break;
            }
            goto give_up;
        }
    }
    SKIP_WS(p, end);
    if (p != end) goto give_up;
    PyBuffer_Release(&view);
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
give_up:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyBuffer_Release(&view);
    return NULL;
}

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "", kwlist)) return -1;
    Py_XSETREF(s->strings, PyList_New(0));
    Py_XSETREF(s->codes, PyDict_New());
    if (!s->strings || !s->codes) return -1;
    return 0;
}

static void Scanner_dealloc(Scanner *s) {
    Py_XDECREF(s->strings);
    Py_XDECREF(s->codes);
    PyMem_Free(s->tab);
    PyMem_Free(s->arena.p);
    for (int c = 0; c < N_COLS; c++) PyMem_Free(s->cols[c].p);
    PyMem_Free(s->fb.p);
    PyMem_Free(s->aux.p);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Scanner_get_strings(Scanner *s, void *c) {
    (void)c;
    Py_INCREF(s->strings);
    return s->strings;
}

static PyObject *Scanner_get_codes(Scanner *s, void *c) {
    (void)c;
    Py_INCREF(s->codes);
    return s->codes;
}

/* join_spans(buffer, spans, sep) -> bytes: buffer[a:b] + sep for each (a, b) of spans (int64 pairs) */
static PyObject *join_spans(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer text, spans;
    int sep;
    if (!PyArg_ParseTuple(args, "y*y*i", &text, &spans, &sep)) return NULL;
    PyObject *out = NULL;
    const int64_t *sp = spans.buf;
    Py_ssize_t k = spans.len / 16, total = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (sp[2 * i] < 0 || sp[2 * i + 1] < sp[2 * i] || sp[2 * i + 1] > text.len) {
            PyErr_SetString(PyExc_ValueError, "a span outside the buffer");
            goto done;
        }
        total += sp[2 * i + 1] - sp[2 * i] + 1;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *o = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t n = sp[2 * i + 1] - sp[2 * i];
        memcpy(o, (const char *)text.buf + sp[2 * i], (size_t)n);
        o += n;
        *o++ = (char)sep;
    }
done:
    PyBuffer_Release(&text);
    PyBuffer_Release(&spans);
    return out;
}

/* first_codes(codes, n) -> (local, dictionary): int32 codes (< n; negative: null) renumbered in
 * order of first occurrence (nulls stay -1), and the codes in that order */
static PyObject *first_codes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer codes;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*n", &codes, &n)) return NULL;
    PyObject *local = NULL, *dict = NULL, *out = NULL;
    Py_ssize_t k = codes.len / 4, m = 0;
    int32_t *seen = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    local = PyByteArray_FromStringAndSize(NULL, k * 4);
    dict = PyByteArray_FromStringAndSize(NULL, (n < k ? n : k) * 4);
    if (!seen || !local || !dict) {
        if (!seen) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) seen[i] = -1;
    const int32_t *c = codes.buf;
    int32_t *l = (int32_t *)PyByteArray_AS_STRING(local), *d = (int32_t *)PyByteArray_AS_STRING(dict);
    for (Py_ssize_t i = 0; i < k; i++) {
        int32_t x = c[i];
        if (x < 0) {
            l[i] = -1;
            continue;
        }
        if (x >= n) {
            PyErr_SetString(PyExc_ValueError, "a code beyond the strings");
            goto done;
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
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"strings", (getter)Scanner_get_strings, NULL, "the interned strings, by code", NULL},
    {"codes", (getter)Scanner_get_codes, NULL, "the code of each interned string", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrace.readers._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner() - scans blocks of Kineto events into columns; strings interned across blocks",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Compiled scanner of Kineto events", -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    if (PyType_Ready(&ScannerType) < 0) return NULL;
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
