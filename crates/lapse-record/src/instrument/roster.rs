//! A table of per-thread records that costs little per thread when tens of
//! thousands are alive at once: the records lie side by side in a slab (no
//! allocation each, and no malloc header each), and the hash index holds
//! only their 4-byte slot numbers (5 bytes a bucket with its control byte,
//! where a `HashMap<ThreadKey, Box<T>>` takes 17, and twice as many buckets
//! as threads just after it grows).
//!
//! A slot freed by a thread let go is taken by the next new thread; when
//! three quarters of the slots are free, the records move to the front and
//! the rest is given back (after a storm of threads, the recorder does not
//! keep its memory for the rest of the recording).
//!
//! A roster holds at most `limit` records: the recorder's memory has a
//! bound whatever the number of threads alive at once, and a thread past it
//! is refused (the caller counts what that loses) rather than followed.
//!
//! A roster knows threads by the kernel's ids alone, 8 bytes a record (at
//! most one thread has an id at a time; which use of the id it is, its
//! serial, is stamped where it is written out: `serials.rs`).

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};
use lapse_data::ThreadKey;

/// A thread's (pid, tid), as a roster keeps it.
type Ids = (u32, u32);

fn ids(key: ThreadKey) -> Ids {
    (key.pid, key.tid)
}
use slab::Slab;
use std::hash::BuildHasher;

/// (a table this small is kept as it is)
const MIN_SLOTS: usize = 1024;

pub struct Roster<T> {
    index: HashTable<u32>,
    records: Slab<(Ids, T)>,
    hasher: DefaultHashBuilder,
    limit: usize,
}

impl<T> Default for Roster<T> {
    fn default() -> Self {
        Self::with_limit(usize::MAX)
    }
}

impl<T> Roster<T> {
    /// A roster of at most `limit` records.
    pub fn with_limit(limit: usize) -> Self {
        Roster {
            index: HashTable::new(),
            records: Slab::new(),
            hasher: DefaultHashBuilder::default(),
            limit,
        }
    }

    fn slot(&self, key: ThreadKey) -> Option<usize> {
        let key = ids(key);
        let records = &self.records;
        self.index
            .find(self.hasher.hash_one(key), |&i| records[i as usize].0 == key)
            .map(|&i| i as usize)
    }

    pub fn get(&self, key: ThreadKey) -> Option<&T> {
        self.slot(key).map(|i| &self.records[i].1)
    }

    pub fn get_mut(&mut self, key: ThreadKey) -> Option<&mut T> {
        self.slot(key).map(|i| &mut self.records[i].1)
    }

    /// The record of `key`, made with `new` if there is none and the
    /// roster is not full (none: it is).
    pub fn get_or_insert_with(
        &mut self,
        key: ThreadKey,
        new: impl FnOnce() -> T,
    ) -> Option<&mut T> {
        let key = ids(key);
        let (records, hasher) = (&self.records, &self.hasher);
        let entry = self.index.entry(
            hasher.hash_one(key),
            |&i| records[i as usize].0 == key,
            |&i| hasher.hash_one(records[i as usize].0),
        );
        let i = match entry {
            Entry::Occupied(e) => *e.get() as usize,
            Entry::Vacant(_) if self.records.len() >= self.limit => return None,
            Entry::Vacant(e) => {
                let i = self.records.insert((key, new()));
                // (thread ids are below the kernel's pid_max, 2^22)
                e.insert(u32::try_from(i).expect("fewer than 2^32 threads"));
                i
            }
        };
        Some(&mut self.records[i].1)
    }

    pub fn remove(&mut self, key: ThreadKey) -> Option<T> {
        let key = ids(key);
        let records = &self.records;
        let found = self
            .index
            .find_entry(self.hasher.hash_one(key), |&i| records[i as usize].0 == key)
            .ok()?;
        let (i, _) = found.remove();
        let (_, record) = self.records.remove(i as usize);
        if self.records.len() * 4 <= self.records.capacity() && self.records.capacity() > MIN_SLOTS
        {
            self.compact();
        }
        Some(record)
    }

    /// Moves the records to the front of their slab and gives the rest
    /// back, in place: a second slab beside the first would be a new peak.
    #[cold]
    fn compact(&mut self) {
        let (index, hasher) = (&mut self.index, &self.hasher);
        self.records.compact(|record, from, to| {
            match index.find_mut(hasher.hash_one(record.0), |&i| i as usize == from) {
                Some(slot) => {
                    *slot = to as u32;
                    true
                }
                None => false, // (every record is in the index)
            }
        });
        let records = &self.records;
        self.index
            .shrink_to(records.len(), |&i| hasher.hash_one(records[i as usize].0));
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (ThreadKey, &T)> {
        self.records
            .iter()
            .map(|(_, (k, t))| (ThreadKey::new(k.0, k.1), t))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (ThreadKey, &mut T)> {
        self.records
            .iter_mut()
            .map(|(_, (k, t))| (ThreadKey::new(k.0, k.1), t))
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.records.iter().map(|(_, (_, t))| t)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.records.iter_mut().map(|(_, (_, t))| t)
    }
}

impl<T: Default> Roster<T> {
    pub fn entry_or_default(&mut self, key: ThreadKey) -> Option<&mut T> {
        self.get_or_insert_with(key, T::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_found_changed_and_let_go_by_key() {
        let mut r: Roster<u64> = Roster::default();
        for tid in 0..1000 {
            *r.entry_or_default(ThreadKey::new(1, tid)).unwrap() += u64::from(tid);
        }
        *r.entry_or_default(ThreadKey::new(1, 7)).unwrap() += 100;
        assert_eq!(r.get(ThreadKey::new(1, 7)), Some(&107));
        assert_eq!(r.get(ThreadKey::new(2, 7)), None);
        assert_eq!(r.remove(ThreadKey::new(1, 7)), Some(107));
        assert_eq!(r.remove(ThreadKey::new(1, 7)), None);
        assert_eq!(r.get(ThreadKey::new(1, 7)), None);
        // (the freed slot goes to the next thread; the others stay found)
        *r.entry_or_default(ThreadKey::new(3, 3)).unwrap() = 33;
        assert_eq!(r.get(ThreadKey::new(3, 3)), Some(&33));
        assert_eq!(r.get(ThreadKey::new(1, 999)), Some(&999));
        assert_eq!(r.iter().count(), 1000);
        let sum: u64 = r.values().sum();
        assert_eq!(sum, (0..1000).sum::<u64>() - 7 + 33);
        *r.get_mut(ThreadKey::new(1, 1)).unwrap() = 0;
        assert_eq!(r.iter().find(|(k, _)| k.tid == 1).map(|(_, v)| *v), Some(0));
    }

    #[test]
    fn a_table_mostly_let_go_gives_its_memory_back() {
        let mut r: Roster<[u64; 8]> = Roster::default();
        for tid in 0..100_000 {
            r.entry_or_default(ThreadKey::new(1, tid)).unwrap()[0] = u64::from(tid);
        }
        let full = r.records.capacity();
        assert!(full >= 100_000);
        for tid in 0..99_000 {
            assert_eq!(
                r.remove(ThreadKey::new(1, tid)).map(|v| v[0]),
                Some(u64::from(tid))
            );
        }
        assert_eq!(r.len(), 1_000);
        assert!(
            r.records.capacity() <= 4 * 1_000 && r.index.capacity() <= 4 * 1_000,
            "{} slots and {} buckets kept for 1,000 threads",
            r.records.capacity(),
            r.index.capacity()
        );
        for tid in 99_000..100_000 {
            assert_eq!(
                r.get(ThreadKey::new(1, tid)).map(|v| v[0]),
                Some(u64::from(tid))
            );
        }
        assert_eq!(r.get(ThreadKey::new(1, 5)), None);
    }

    #[test]
    fn a_full_roster_refuses_new_threads_until_one_goes() {
        let mut r: Roster<u32> = Roster::with_limit(3);
        for tid in 0..3 {
            *r.entry_or_default(ThreadKey::new(1, tid)).unwrap() = tid;
        }
        assert!(r.entry_or_default(ThreadKey::new(1, 3)).is_none());
        assert_eq!(r.len(), 3);
        // (a thread it holds is still found and changed)
        *r.entry_or_default(ThreadKey::new(1, 2)).unwrap() += 10;
        assert_eq!(r.get(ThreadKey::new(1, 2)), Some(&12));
        assert_eq!(r.remove(ThreadKey::new(1, 0)), Some(0));
        *r.entry_or_default(ThreadKey::new(1, 3)).unwrap() = 3;
        assert_eq!(r.get(ThreadKey::new(1, 3)), Some(&3));
        assert!(r.entry_or_default(ThreadKey::new(1, 4)).is_none());
    }
}
