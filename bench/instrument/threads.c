/* bench/instrument/threads.c - N threads alive at once (threads.sh): each
 * makes 5 calls, waits at a barrier for all the others, makes 5 more.
 * usage: threads N */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE void work(int i) { sink += (uint64_t)i; }
static pthread_barrier_t all_in;
NOINLINE void *body(void *arg) {
    (void)arg;
    for (int i = 0; i < 5; i++) work(i);
    pthread_barrier_wait(&all_in);
    for (int i = 0; i < 5; i++) work(i);
    return NULL;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    pthread_t *t = calloc(n, sizeof *t);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    pthread_barrier_init(&all_in, NULL, n);
    int made = 0;
    for (int i = 0; i < n; i++) if (pthread_create(&t[i], &a, body, NULL) == 0) made++; else { printf("failed at %d\n", i); exit(2);} 
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    printf("threads %d\n", made);
    return 0;
}
