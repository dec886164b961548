/* The program behind offcpu.lapse (see README.md): recorded with
 * --off-cpu. The main thread computes (crunch), blocks on a pipe until a
 * second thread writes to it (wait_pipe), then sleeps (nap). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#define NOINLINE __attribute__((noipa))
volatile uint64_t sink;
static int fds[2];
NOINLINE uint64_t crunch(uint64_t n) { uint64_t x = n; for (uint64_t i = 0; i < n; i++) x = x * 6364136223846793005ULL + i; return x; }
NOINLINE void wait_pipe(void) { char c; if (read(fds[0], &c, 1) != 1) abort(); }
NOINLINE void nap(void) { usleep(20000); }
static void *writer(void *arg) { (void)arg; usleep(100000); char c = 1; if (write(fds[1], &c, 1) != 1) abort(); return 0; }
int main(int argc, char **argv) {
    uint64_t u = argc > 1 ? strtoull(argv[1], 0, 10) : 1000000;
    if (pipe(fds) != 0) return 1;
    pthread_t t;
    pthread_create(&t, 0, writer, 0);
    sink += crunch(30 * u);
    wait_pipe();
    nap();
    pthread_join(t, 0);
    return 0;
}
