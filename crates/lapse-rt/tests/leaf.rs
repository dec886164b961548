//! `lapse_leaf_exit` (csrc/rt.h) with a small C driver: when an exit is
//! written into its entry's slot (a leaf call in one slot) and when it must
//! take a slot of its own. A merge where it must not be would put an exit
//! into a buffer handed over already, onto a slot left from the buffer's
//! last use, or onto another call's entry; the recorder's side (the slot
//! read back as an entry and an exit) is tested in lapse-record.

mod driver;

const DRIVER: &str = r#"
#include "rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F 0x401000u
#define G 0x402000u
#define SP 0x7ffc0000f000ull

/* One case: a buffer claimed at tick `now - 100000`, slot 0 holding an entry
 * of F at SP stamped `ago` ticks back (`exit_bit`: an exit instead), `more`
 * slots after it (an entry of G each), the cursor after them. Prints
 * whether the exit of (fn, sp) merged, slot 0's sp after, and the
 * buffer's count of leaf slots (its events number the next buffer). */
static void one(const char *name, uintptr_t fn, uint64_t sp, uint64_t ago, int exit_bit,
                int more, int first_slot, int due, uint64_t entry_sp)
{
    static struct lapse_event *buf;
    if (!buf)
        buf = aligned_alloc(BUF_BYTES, BUF_BYTES);
    memset(buf, 0, BUF_BYTES);
    struct lapse_tls t;
    memset(&t, 0, sizeof t);
    uint64_t now = lapse_ticks();
    t.fill.base = buf;
    t.fill.claimed = now - 100000;
    t.deadline = due ? now - 1 : now + (1ull << 40);
    buf[0].fn = F;
    buf[0].stamp = ((now - ago) << 1) | (uint64_t)exit_bit;
    buf[0].sp = entry_sp;
    for (int i = 1; i <= more; i++) {
        buf[i].fn = G;
        buf[i].stamp = ((now - ago + (uint64_t)i) << 1);
        buf[i].sp = entry_sp - 64;
    }
    t.cur = first_slot ? buf : buf + 1 + more;
    int merged = lapse_leaf_exit(&t, fn, sp);
    printf("%s %d %llx %llu %u\n", name, merged,
           (unsigned long long)(buf[0].sp >> LAPSE_LEAF_SHIFT),
           (unsigned long long)(buf[0].sp & ((1ull << LAPSE_LEAF_SHIFT) - 1)), t.fill.leaves);
}

int main(void)
{
    /* name, fn, sp, ago, exit_bit, more, first_slot, due, entry_sp */
    one("leaf", F, SP, 50, 0, 0, 0, 0, SP);
    one("other_fn", G, SP, 50, 0, 0, 0, 0, SP);
    one("other_sp", F, SP - 16, 50, 0, 0, 0, 0, SP);
    one("event_between", F, SP, 50, 0, 1, 0, 0, SP);
    one("after_an_exit", F, SP, 50, 1, 0, 0, 0, SP);
    one("first_slot", F, SP, 50, 0, 0, 1, 0, SP);
    one("due", F, SP, 50, 0, 0, 0, 1, SP);
    one("stale", F, SP, 200000, 0, 0, 0, 0, SP);
    one("too_long", F, SP, 70000, 0, 0, 0, 0, SP);
    one("high_sp", F, 1ull << 47, 50, 0, 0, 0, 0, 1ull << 47);
    /* an inner call of F merged already: the outer exit's sp differs */
    one("merged_already", F, SP, 50, 0, 0, 0, 0, SP | LAPSE_LEAF_BIT | (7ull << LAPSE_LEAF_SHIFT));
    return 0;
}
"#;

#[test]
fn an_exit_goes_into_its_entrys_slot_only_when_that_is_the_threads_last_one() {
    let dir = tempfile::tempdir().unwrap();
    let exe = driver::build(dir.path(), "leaf", DRIVER, &[]);
    let text = driver::output(&exe, &[]);
    let sp = 0x7ffc_0000_f000u64;
    let mut seen = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (name, merged) = (f[0], f[1] == "1");
        let top = u64::from_str_radix(f[2], 16).unwrap();
        let low: u64 = f[3].parse().unwrap();
        let leaves: u32 = f[4].parse().unwrap();
        assert_eq!(leaves, u32::from(merged), "counted as it merged: {line}");
        seen += 1;
        if name == "leaf" {
            assert!(merged, "{line}");
            // the leaf bit (bit 16 of the top), and the ticks since the
            // entry: at least its 50, less than 65536
            assert_eq!(top >> 16, 1, "{line}");
            assert!((50..0xffff).contains(&(top & 0xffff)), "{line}");
            assert_eq!(low, sp, "the entry's sp is kept: {line}");
        } else {
            assert!(!merged, "{line}");
            if name != "high_sp" && name != "merged_already" {
                assert_eq!((top, low), (0, sp), "the entry untouched: {line}");
            }
        }
    }
    assert_eq!(seen, 11, "{text}");
}
