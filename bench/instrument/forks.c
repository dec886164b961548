/* bench/instrument/forks.c - N short processes one after the other: each
 * forked child makes 100 calls and exits, the parent waits for it. The
 * recorder's memory must not grow with the processes a run has had (SPEC 7).
 * usage: forks N
 *   gcc -O2 -finstrument-functions -o forks bench/instrument/forks.c
 *   /usr/bin/time -f %M lapse record -o f.lapse -- ./forks 20000
 * (for sampling: lapse record --method sample -- sh -c 'for i in $(seq N); do /bin/true; done') */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) void work(int i) { volatile int x = i; (void)x; }
__attribute__((noinline)) void child(void) { for (int i = 0; i < 100; i++) work(i); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0) { child(); _exit(0); }
        if (p < 0 || waitpid(p, NULL, 0) != p) { perror("fork"); return 2; }
    }
    printf("forked %d\n", n);
    return 0;
}
