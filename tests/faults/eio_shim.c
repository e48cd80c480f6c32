/* An LD_PRELOAD shim that makes writes and syncs fail with EIO for the files
 * under chosen directories, as a failing disk under one log dir would.
 *
 * The file named by EIO_SHIM_CONTROL_FILE lists directories, one absolute
 * path a line; while it names any, write, pwrite, pwrite64, writev, pwritev,
 * pwritev64, pwritev2, pwritev64v2, fsync, fdatasync, syncfs and sync_file_range on a
 * descriptor whose file lies under one of them (by /proc/self/fd) fail with
 * EIO and write nothing. Everything else (reads, opens, renames, sockets,
 * files elsewhere) is untouched. The file is read again at most every
 * RELOAD_NS of monotonic time, so a change takes effect within that; a missing
 * or empty file means no failures, and then no call pays more than a clock
 * read.
 *
 * The fault suite builds it with the C compiler into a run's folder
 * (tests/faults/eio.py), as it builds the clock shim.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RELOAD_NS 20000000LL /* 20 ms */
#define NS_PER_S 1000000000LL
#define DIRS_MAX 8
#define PATH_BYTES 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char dirs[DIRS_MAX][PATH_BYTES]; /* under lock */
static int dir_count;                   /* read with __atomic builtins, written under lock */
static long long next_reload_ns = -1;   /* monotonic ns; -1: never read yet */

/* The next definition of a function (libc's), looked up once per call site. */
#define REAL(name)                                \
    static __typeof__(&name) real_##name;         \
    if (real_##name == NULL) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

static long long monotonic_ns(void) {
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &now) != 0) return 0;
    return (long long)now.tv_sec * NS_PER_S + now.tv_nsec;
}

static void reload(void) {
    const char *path = getenv("EIO_SHIM_CONTROL_FILE");
    char text[DIRS_MAX * 512];
    ssize_t length = 0;
    if (path != NULL) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            length = read(fd, text, sizeof text - 1);
            close(fd);
        }
    }
    if (length < 0) length = 0;
    text[length] = '\0';
    pthread_mutex_lock(&lock);
    int count = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL && count < DIRS_MAX; line = strtok_r(NULL, "\n", &save)) {
        size_t n = strlen(line);
        while (n > 1 && line[n - 1] == '/') line[--n] = '\0'; /* "/a/b/" matches as "/a/b" */
        if (n == 0 || n >= PATH_BYTES || line[0] != '/') continue;
        memcpy(dirs[count], line, n + 1);
        count++;
    }
    __atomic_store_n(&dir_count, count, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

/* Whether a write or sync on fd must fail now. */
static int failing(int fd) {
    long long now_ns = monotonic_ns();
    long long due = __atomic_load_n(&next_reload_ns, __ATOMIC_RELAXED);
    if ((due < 0 || now_ns >= due) &&
        __atomic_compare_exchange_n(&next_reload_ns, &due, now_ns + RELOAD_NS, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        reload();
    }
    if (__atomic_load_n(&dir_count, __ATOMIC_ACQUIRE) == 0 || fd < 0) return 0;
    char link[64], target[PATH_BYTES];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = '\0';
    int hit = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < dir_count && !hit; i++) {
        size_t len = strlen(dirs[i]);
        hit = strncmp(target, dirs[i], len) == 0 && (target[len] == '/' || target[len] == '\0');
    }
    pthread_mutex_unlock(&lock);
    return hit;
}

#define FAIL_IF(fd)           \
    do {                      \
        if (failing(fd)) {    \
            errno = EIO;      \
            return -1;        \
        }                     \
    } while (0)

ssize_t write(int fd, const void *buf, size_t count) {
    FAIL_IF(fd);
    REAL(write);
    return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    FAIL_IF(fd);
    REAL(pwrite);
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    FAIL_IF(fd);
    REAL(pwrite64);
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    FAIL_IF(fd);
    REAL(writev);
    return real_writev(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    FAIL_IF(fd);
    REAL(pwritev);
    return real_pwritev(fd, iov, iovcnt, offset);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off64_t offset) {
    FAIL_IF(fd);
    REAL(pwritev64);
    return real_pwritev64(fd, iov, iovcnt, offset);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    FAIL_IF(fd);
    REAL(pwritev2);
    return real_pwritev2(fd, iov, iovcnt, offset, flags);
}

/* What CPython's os.pwritev calls (glibc 2.26+). */
ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off64_t offset, int flags) {
    FAIL_IF(fd);
    REAL(pwritev64v2);
    return real_pwritev64v2(fd, iov, iovcnt, offset, flags);
}

int fsync(int fd) {
    FAIL_IF(fd);
    REAL(fsync);
    return real_fsync(fd);
}

int fdatasync(int fd) {
    FAIL_IF(fd);
    REAL(fdatasync);
    return real_fdatasync(fd);
}

int syncfs(int fd) {
    FAIL_IF(fd);
    REAL(syncfs);
    return real_syncfs(fd);
}

int sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags) {
    FAIL_IF(fd);
    REAL(sync_file_range);
    return real_sync_file_range(fd, offset, nbytes, flags);
}
