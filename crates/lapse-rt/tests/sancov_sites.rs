//! `csrc/sancov.c`'s classification of the places the sanitizer-coverage
//! hook is called from, on synthetic machine code: a small C driver lays
//! out functions in a buffer (the module's code) and asks `classify_in`
//! what each call is. Only a function's entry is a call of it; a function
//! that only jumps to the hook is a call of that function; a hook call of
//! code inlined further into a function is none.

mod driver;

const DRIVER: &str = r#"
#include "sancov.c"
#include <stdio.h>

/* (what sancov.c calls elsewhere in the runtime: not reached here) */
int lapse_hook_enter_slow(struct lapse_hook *h) { (void)h; return 0; }
int lapse_hook_owns(const uintptr_t *slot, uintptr_t fn) { (void)slot; (void)fn; return 0; }
void lapse_mark(uint64_t mark, uintptr_t sp) { (void)mark; (void)sp; }
void lapse_sancov_entry(uint32_t *guard) { (void)guard; }

static uint8_t code[2048] __attribute__((aligned(16)));
static uint32_t guards[8], elsewhere[1];
static struct sancov_module m;

static uintptr_t at(unsigned off) { return (uintptr_t)code + off; }
static void rel32(unsigned off, uintptr_t target, unsigned len)
{
    int32_t d = (int32_t)(target - at(off + len));
    memcpy(code + off + len - 4, &d, 4);
}
/* each returns the offset after what it wrote */
static unsigned endbr(unsigned o) { memcpy(code + o, "\xf3\x0f\x1e\xfa", 4); return o + 4; }
static unsigned lea_rdi(unsigned o, const void *p)
{ memcpy(code + o, "\x48\x8d\x3d", 3); rel32(o, (uintptr_t)p, 7); return o + 7; }
static unsigned call(unsigned o, unsigned to) { code[o] = 0xe8; rel32(o, at(to), 5); return o + 5; }
static unsigned call_got(unsigned o, unsigned slot)
{ code[o] = 0xff; code[o + 1] = 0x15; rel32(o, at(slot), 6); return o + 6; }
static unsigned jmp(unsigned o, unsigned to) { code[o] = 0xe9; rel32(o, at(to), 5); return o + 5; }

static const char *names[] = {"entry", "tail", "other"};

/* one line: what the call returning to `ret` with guard g is, and the
 * offset of the function it names */
static void ask(const char *what, unsigned ret, const uint32_t *g, const unsigned *begin)
{
    uintptr_t b = begin ? at(*begin) : 0, fn = 0;
    int k = classify_in(&m, g, at(ret), begin ? &b : NULL, &fn);
    printf("%s %s %ld\n", what, names[k], k == SITE_OTHER ? -1L : (long)(fn - (uintptr_t)code));
}

int main(void)
{
    memset(code, 0x90, sizeof code);
    m.lo = (uintptr_t)code;
    m.hi = (uintptr_t)code + sizeof code;
    m.start = guards;
    m.stop = guards + 8;
    /* the hook: the stub's jump through memory (0x700), a PLT entry with
     * endbr64 and bnd (0x710) */
    memcpy(code + 0x700, "\xff\x25\0\0\0\0", 6);
    memcpy(code + 0x710, "\xf3\x0f\x1e\xfa\xf2\xff\x25\0\0\0\0", 11);
    /* f at 0x10: endbr64, push %rbp, its own guard, then code inlined
     * into it with its guard */
    unsigned f = 0x10, o = endbr(f);
    code[o++] = 0x55;
    unsigned f_entry = call(lea_rdi(o, &guards[0]), 0x700);
    unsigned f_inlined = call(lea_rdi(f_entry + 20, &guards[1]), 0x700);
    ask("f-entry", f_entry, &guards[0], &f);
    ask("f-inlined", f_inlined, &guards[1], &f);
    ask("f-entry-foreign-guard", f_entry, elsewhere, &f);
    ask("f-entry-no-unwind-entry", f_entry, &guards[0], NULL);
    /* g at 0x100: a hook call 300 bytes in, the first of g's: not an entry */
    unsigned g = 0x100;
    unsigned g_far = call(lea_rdi(g + 300, &guards[2]), 0x700);
    ask("g-far", g_far, &guards[2], &g);
    /* h at 0x300 calls through the GOT; k at 0x340 through a PLT entry */
    unsigned h = 0x300, k = 0x340;
    ask("h-got", call_got(lea_rdi(h + 1, &guards[3]), 0x7f0), &guards[3], &h);
    ask("k-plt", call(lea_rdi(endbr(k), &guards[4]), 0x710), &guards[4], &k);
    /* t at 0x400 does nothing but hand guard 5 to the hook; c at 0x500
     * calls it (and calls q, which does something else) */
    unsigned t = 0x400, c = 0x500, q = 0x440;
    jmp(lea_rdi(endbr(t), &guards[5]), 0x700);
    memcpy(code + q, "\x55\x48\x8d\x3d", 4); /* push %rbp; lea ... */
    unsigned c_calls_t = call(c + 30, t), c_calls_q = call(c_calls_t + 10, q);
    ask("c-calls-t", c_calls_t, &guards[5], &c);
    ask("c-calls-t-other-guard", c_calls_t, &guards[6], &c);
    ask("c-calls-q", c_calls_q, &guards[5], &c);
    return 0;
}
"#;

/// The driver's answers: one line per case, `name kind function-offset`.
fn answers() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let exe = driver::build(dir.path(), "sancov_sites", DRIVER, &[]);
    driver::output(&exe, &[])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
#[cfg(target_arch = "x86_64")]
fn only_a_functions_first_hook_call_near_its_start_is_its_entry() {
    let a = answers();
    let expected = [
        // its own guard after the prologue: an entry, of the function's start
        "f-entry entry 16",
        // a second hook call in it: code inlined into f
        "f-inlined other -1",
        // a guard of another module handed over from here: not f's hook call
        "f-entry-foreign-guard other -1",
        // no unwind entry: an entry (find_rule then leaves it unrecorded)
        "f-entry-no-unwind-entry entry 33",
        // the first hook call, but 300 bytes into g: inlined code
        "g-far other -1",
        // the hook reached through the GOT, or a PLT entry
        "h-got entry 768",
        "k-plt entry 832",
        // t only jumps to the hook: the hook returns into c, and it is t's call
        "c-calls-t tail 1024",
        // ... only with t's own guard
        "c-calls-t-other-guard other -1",
        // q does more than that: the hook cannot have returned from it here
        "c-calls-q other -1",
    ];
    assert_eq!(a, expected);
}
