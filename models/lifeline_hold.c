/* aitb-hold: the exec wrapper of models/lifeline.py. It runs between fork and the program's
 * exec instead of any Python code (a preexec_fn in a multi-threaded parent can deadlock on a
 * lock another thread held at fork time), and holds the program until its starter says go.
 *
 *   aitb-hold GO_FD PARENT_PID PDEATHSIG PROGRAM [ARG...]
 *
 * 1. PDEATHSIG > 0: prctl(PR_SET_PDEATHSIG) (the signal comes when the thread that forked
 *    us ends); then exit 1 if PARENT_PID is no longer our parent (it died before that).
 * 2. GO_FD >= 0: wait for one byte 'g' on GO_FD, sent once the starter has registered us
 *    (pid and start time). EOF (the starter died or gave up) or a dead parent (checked every
 *    100 ms, in case a forked copy of the starter still holds the pipe): exit 1, never exec.
 * 3. execvp(PROGRAM); if that fails: a message on stderr, exit 127.
 * Bad arguments: exit 126. No allocation, no locale, nothing but system calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static long number(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        _exit(126);
    return v;
}

static void say(const char *s) {
    ssize_t n = write(2, s, strlen(s));
    (void)n;
}

int main(int argc, char **argv) {
    if (argc < 5)
        return 126;
    int go = (int)number(argv[1]);
    pid_t parent = (pid_t)number(argv[2]);
    int sig = (int)number(argv[3]);
    if (sig > 0 && prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0)
        return 126;
    if (getppid() != parent)
        return 1;
    if (go >= 0) {
        for (;;) {
            struct pollfd p = {.fd = go, .events = POLLIN};
            int n = poll(&p, 1, 100);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return 1;
            if (n == 0) {
                if (getppid() != parent)
                    return 1;
                continue;
            }
            char c = 0;
            ssize_t r = read(go, &c, 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r != 1 || c != 'g')
                return 1;
            break;
        }
        close(go);
    }
    execvp(argv[4], argv + 4);
    int e = errno;
    say("aitb-hold: cannot execute ");
    say(argv[4]);
    say(": ");
    say(strerror(e));
    say("\n");
    return 127;
}
