//! `csrc/slots.c` built alone with a small C driver: which slots of a
//! buffer count as written. Every hand-over asks (a slot a probe claimed and
//! has not written yet keeps the buffer parked, so that the probe's late
//! write cannot land in a buffer the recorder has), and the answer comes from
//! a fast path that looks at all the stamps at once: these cases are the ones
//! where it and the slot-by-slot look could disagree.

mod driver;

const DRIVER: &str = r#"
#include "rt.h"
#include <stdio.h>
#include <stdlib.h>

static struct lapse_event slots[BUF_USABLE];

/* count slots from claim 1000 on: written ones stamped after it */
static unsigned run(unsigned count, int hole_a, int hole_b, uint64_t hole_stamp)
{
    struct lapse_buf b = {0};
    b.base = slots;
    b.claimed = 1000;
    for (unsigned i = 0; i < BUF_USABLE; i++) {
        slots[i].fn = 0x401000 + i;
        slots[i].stamp = ((1000 + i) << 1) | (i & 1); /* the first at the claim itself */
        slots[i].sp = 0;
    }
    if (hole_a >= 0)
        slots[hole_a].stamp = hole_stamp;
    if (hole_b >= 0)
        slots[hole_b].stamp = hole_stamp;
    return lapse_written_prefix(&b, count);
}

int main(int argc, char **argv)
{
    (void)argc;
    unsigned count = (unsigned)atoi(argv[1]);
    int a = atoi(argv[2]), b = atoi(argv[3]);
    uint64_t stamp = strtoull(argv[4], NULL, 10);
    printf("%u\n", run(count, a, b, stamp));
    return 0;
}
"#;

#[test]
fn a_buffer_counts_as_written_up_to_its_first_slot_stamped_before_the_claim() {
    let dir = tempfile::tempdir().unwrap();
    let exe = driver::build(dir.path(), "slots", DRIVER, &["slots.c"]);
    let ask = |count: u32, a: i64, b: i64, stamp: u64| -> u32 {
        let args = [
            count.to_string(),
            a.to_string(),
            b.to_string(),
            stamp.to_string(),
        ];
        driver::output(&exe, &args).trim().parse().unwrap()
    };
    const FULL: u32 = 2560;
    // every slot written, whatever the count (the fast path's four lanes
    // and its tail)
    for count in [0, 1, 3, 4, 5, 7, 8, FULL - 1, FULL] {
        assert_eq!(ask(count, -1, -1, 0), count, "count {count}");
    }
    // a hole in any lane, in the tail, first and last: the slots before it
    // (a zero slot: never used; 1999: left from the buffer's last use, one
    // tick before this claim)
    for stamp in [0, 1999] {
        for hole in [
            0i64,
            1,
            2,
            3,
            4,
            1234,
            1235,
            1236,
            1237,
            2556,
            FULL as i64 - 1,
        ] {
            assert_eq!(ask(FULL, hole, -1, stamp), hole as u32, "hole at {hole}");
        }
        assert_eq!(ask(7, 6, -1, stamp), 6, "a hole in the tail");
        assert_eq!(ask(7, 5, 2, stamp), 2, "the first of two holes");
        // a hole past the count is not looked at
        assert_eq!(ask(1000, 1500, -1, stamp), 1000);
    }
    // stamped at the claim's tick itself: written (exit bit set or not)
    assert_eq!(ask(FULL, 7, -1, 2000), FULL);
    assert_eq!(ask(FULL, 7, -1, 2001), FULL);
}
