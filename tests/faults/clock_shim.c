/* An LD_PRELOAD shim that moves a process's wall clock and nothing else.
 *
 * CLOCK_REALTIME and CLOCK_REALTIME_COARSE (clock_gettime), gettimeofday and
 * time are shifted by a signed number of seconds read from the file named by
 * CLOCK_SHIM_OFFSET_FILE; CLOCK_MONOTONIC, CLOCK_BOOTTIME and the process and
 * thread clocks stay real, so sleeps, timeouts and event loops keep working
 * while the process sees its wall clock jump. The file is read again at most
 * every RELOAD_NS of real monotonic time, so a jump written to it takes effect
 * within that; a missing or unreadable file means no offset.
 *
 * The fault suite builds it with the C compiler into a run's folder
 * (tests/faults/clock.py); Debian's libfaketime 0.9.10 could not be used with
 * Python: with its monotonic clock left real, time.sleep fails with EINVAL.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RELOAD_NS 20000000LL /* 20 ms */
#define NS_PER_S 1000000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static long long offset_ns;          /* read and written with __atomic builtins */
static long long next_reload_ns = -1; /* monotonic ns; -1: never read yet */

static clock_gettime_fn real(void) {
    clock_gettime_fn fn = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        __atomic_store_n(&real_clock_gettime, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

static long long read_offset_ns(void) {
    const char *path = getenv("CLOCK_SHIM_OFFSET_FILE");
    char text[64];
    if (path == NULL) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t length = read(fd, text, sizeof text - 1);
    close(fd);
    if (length <= 0) return 0;
    text[length] = '\0';
    char *end;
    double seconds = strtod(text, &end);
    if (end == text) return 0;
    return (long long)(seconds * (double)NS_PER_S);
}

static long long current_offset_ns(void) {
    struct timespec now;
    if (real()(CLOCK_MONOTONIC_COARSE, &now) != 0) return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    long long now_ns = (long long)now.tv_sec * NS_PER_S + now.tv_nsec;
    long long due = __atomic_load_n(&next_reload_ns, __ATOMIC_RELAXED);
    /* One thread wins the reload; the others use the offset they find. */
    if ((due < 0 || now_ns >= due) &&
        __atomic_compare_exchange_n(&next_reload_ns, &due, now_ns + RELOAD_NS, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        __atomic_store_n(&offset_ns, read_offset_ns(), __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
}

static void shift(struct timespec *ts, long long by_ns) {
    long long ns = (long long)ts->tv_sec * NS_PER_S + ts->tv_nsec + by_ns;
    long long seconds = ns / NS_PER_S, rest = ns % NS_PER_S;
    if (rest < 0) {
        rest += NS_PER_S;
        seconds -= 1;
    }
    ts->tv_sec = (time_t)seconds;
    ts->tv_nsec = (long)rest;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int result = real()(clock, ts);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) shift(ts, current_offset_ns());
    return result;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec now;
    (void)tz; /* obsolete; glibc ignores it too */
    if (tv == NULL) return 0;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return -1;
    tv->tv_sec = now.tv_sec;
    tv->tv_usec = now.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return (time_t)-1;
    if (out != NULL) *out = now.tv_sec;
    return now.tv_sec;
}
