/* The program behind instr.lapse (see README.md): a little of everything a
 * report shows - two threads, recursion, a sleep (an OS event), a forked
 * child, and a function called from two callers. */
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE uint64_t mix(uint64_t x, int n) {
    for (int i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}
NOINLINE uint64_t walk(int depth) { return depth == 0 ? mix(depth, 2000) : mix(walk(depth - 1), 500); }
NOINLINE void nap(void) { struct timespec d = {0, 5000000}; nanosleep(&d, NULL); }
NOINLINE void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 20; i++) sink += mix(i, 3000);
    nap();
    return 0;
}
NOINLINE void child_work(void) { sink += walk(3); }
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    for (int i = 0; i < 10; i++) sink += walk(5);
    nap();
    pid_t pid = fork();
    if (pid == 0) { child_work(); _exit(0); }
    waitpid(pid, 0, 0);
    pthread_join(t, 0);
    return 0;
}
