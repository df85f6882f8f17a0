/* The native number reader of read_numeric_csv (parsers/token_csv.py, loaded by
 * parsers/csv_native.py): a run of well-formed rows (every line exactly ncol numbers, nothing
 * else) straight into float64 columns, one array per column.
 *
 * A number accepted is [+-]? digits* (dec digits*)? ([eE] [+-]? digits+)? with at least one
 * mantissa digit. It is converted here when its digits fit 2^53 and its decimal exponent is within
 * 10^22: one correctly rounded multiply or divide by an exact power of ten (the fast path of every
 * strtod). Any other number is written as NaN and listed for Python's float() as a fix-up, so every
 * value equals float(cell). docs/telemetry.md "Per-token CSV".
 */
#include <stdint.h>

#define MALFORMED (-1)   /* a byte, a field count or a number form that is not a well-formed row */
#define FIXUPS_FULL (-2) /* more inexact numbers than the fix-up table holds */
#define NO_ROOM (-3)     /* more lines than the columns have rows for */

static const double P10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* Read buf[0:n] (whole lines, ending with LF) into cols[col][row0 + i]. delim/dec: the field
 * separator and decimal mark. Numbers not converted here are NaN in cols and listed in fix as
 * (row, column, first byte, end byte), at most fixcap of them; *nfix says how many. Returns the
 * rows read, MALFORMED, FIXUPS_FULL or NO_ROOM (a line past row cap - 1; nothing is written there). */
int64_t bmoe_csv_rows(const uint8_t *buf, int64_t n, int ncol, int delim, int dec, double *const *cols,
                      int64_t row0, int64_t cap, int64_t *fix, int64_t fixcap, int64_t *nfix) {
    *nfix = 0;
    if (n <= 0 || buf[n - 1] != '\n')
        return MALFORMED;
    int64_t i = 0, row = row0, nf = 0;
    int col = 0;
    while (i < n) {
        if (row >= cap) {
            *nfix = nf;
            return NO_ROOM;
        }
        int64_t start = i;
        int neg = 0;
        if (buf[i] == '-') {
            neg = 1;
            i++;
        } else if (buf[i] == '+') {
            i++;
        }
        uint64_t m = 0;
        int digits = 0, big = 0;
        int64_t exp10 = 0;
        while (i < n && buf[i] >= '0' && buf[i] <= '9') {
            if (m < 100000000000000000ULL)
                m = m * 10 + (uint64_t)(buf[i] - '0');
            else {
                big = 1;
                exp10++;
            }
            digits++;
            i++;
        }
        if (i < n && buf[i] == dec) {
            i++;
            while (i < n && buf[i] >= '0' && buf[i] <= '9') {
                if (m < 100000000000000000ULL) {
                    m = m * 10 + (uint64_t)(buf[i] - '0');
                    exp10--;
                } else {
                    big = 1;
                }
                digits++;
                i++;
            }
        }
        if (digits == 0)
            return MALFORMED;
        if (i < n && (buf[i] == 'e' || buf[i] == 'E')) {
            i++;
            int eneg = 0;
            if (i < n && (buf[i] == '-' || buf[i] == '+')) {
                eneg = buf[i] == '-';
                i++;
            }
            int64_t e = 0;
            int edigits = 0;
            while (i < n && buf[i] >= '0' && buf[i] <= '9') {
                if (e < 100000)
                    e = e * 10 + (buf[i] - '0');
                edigits++;
                i++;
            }
            if (edigits == 0)
                return MALFORMED;
            exp10 += eneg ? -e : e;
        }
        if (i >= n || col >= ncol)
            return MALFORMED;
        double v;
        if (m == 0 && !big) {
            v = 0.0;
        } else if (!big && m <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
            v = exp10 >= 0 ? (double)m * P10[exp10] : (double)m / P10[-exp10];
        } else {
            if (nf >= fixcap) {
                *nfix = nf;
                return FIXUPS_FULL;
            }
            fix[4 * nf] = row;
            fix[4 * nf + 1] = col;
            fix[4 * nf + 2] = start;
            fix[4 * nf + 3] = i;
            nf++;
            v = __builtin_nan("");
        }
        cols[col][row] = neg ? -v : v;
        uint8_t c = buf[i++];
        if (c == delim) {
            col++;
        } else if (c == '\n') {
            if (col != ncol - 1) {
                *nfix = nf;
                return MALFORMED;
            }
            col = 0;
            row++;
        } else {
            *nfix = nf;
            return MALFORMED;
        }
    }
    *nfix = nf;
    return row - row0;
}
