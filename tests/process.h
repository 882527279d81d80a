/* process.h -- what a test learns of its own process: how many threads it
 * has (tasks), and whether the child of a threaded process may start
 * threads, for the tests that call the library in a child after a fork
 * (child_can_start_threads). GCC 12's ThreadSanitizer runtime stops it ("dup thread with used id", as
 * the new thread reuses a vanished one's stack); clang 14's, and every
 * build without TSan, let it. A probe child tries, its reports sent to
 * /dev/null. */
#ifndef ATTN_TESTS_PROCESS_H
#define ATTN_TESTS_PROCESS_H

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Threads of this process (/proc/self/task), -1 where it cannot be read. */
static inline int tasks(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ThreadSanitizer kills by default a child that starts threads after a
 * fork of a threaded process; the fork checks' children must start the
 * pool. */
#if defined(__SANITIZE_THREAD__)
#define TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_UNDER_TSAN 1
#endif
#endif
#ifdef TEST_UNDER_TSAN
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "die_after_fork=0"; }

static inline void *fork_probe_thread(void *arg) { return arg; }

static inline int child_can_start_threads(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
        pthread_t t;
        _exit(pthread_create(&t, NULL, fork_probe_thread, NULL) == 0 && pthread_join(t, NULL) == 0 ? 0 : 1);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
#else
static inline int child_can_start_threads(void) { return 1; }
#endif

#endif
