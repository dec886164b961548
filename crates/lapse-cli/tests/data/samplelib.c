#include <stdint.h>
uint64_t lib_spin(uint64_t n) { uint64_t x = n; for (uint64_t i = 0; i < n; i++) x = x * 3202034522624059733ULL + i; return x; }
