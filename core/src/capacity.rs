//! Giving back a table's spare capacity once it has mostly emptied. Rust's maps keep
//! the capacity of their busiest moment; Redis's dicts shrink when sparse, and a module
//! inside Redis must not hold memory for a queue of 10,000 waiters that is long gone.
//! The rule is one line, kept here so that every table applies the same one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// Whether a table holding `len` entries with room for `capacity` is worth shrinking:
/// under a quarter full, and big enough for the rehash to matter. The hysteresis (shrink
/// to half full, grow back only when full) makes each shrink's O(n) rehash paid for by
/// the removals before it.
fn is_sparse(len: usize, capacity: usize) -> bool {
    capacity > 4 * len + 64
}

/// The capacity a sparse table shrinks to.
fn shrunk_capacity(len: usize) -> usize {
    2 * len + 32
}

/// A table that can tell its size and give back room.
pub trait Table {
    fn entries(&self) -> usize;
    fn room(&self) -> usize;
    fn shrink_to(&mut self, capacity: usize);
}

/// `Table` for a std collection, whose methods already have these names.
macro_rules! std_table {
    ([$($generics:tt)*] $collection:ty) => {
        impl<$($generics)*> Table for $collection {
            fn entries(&self) -> usize {
                self.len()
            }
            fn room(&self) -> usize {
                self.capacity()
            }
            fn shrink_to(&mut self, capacity: usize) {
                <$collection>::shrink_to(self, capacity);
            }
        }
    };
}

std_table!([K: Eq + Hash, V, S: std::hash::BuildHasher] HashMap<K, V, S>);
std_table!([T: Eq + Hash, S: std::hash::BuildHasher] HashSet<T, S>);
std_table!([T] VecDeque<T>);

/// Shrinks `table` if it is sparse.
pub fn trim(table: &mut impl Table) {
    if is_sparse(table.entries(), table.room()) {
        table.shrink_to(shrunk_capacity(table.entries()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_that_emptied_gives_back_its_room() {
        let mut map: HashMap<u64, u64> = (0..10_000).map(|i| (i, i)).collect();
        let peak = map.capacity();
        map.retain(|k, _| *k < 10);
        trim(&mut map);
        assert!(map.capacity() < 64, "{} of {peak}", map.capacity());
        assert_eq!(map.len(), 10);
    }

    #[test]
    fn a_small_or_busy_table_is_left_alone() {
        // 1,000 entries take 2,048 buckets (room for 1,792); a trimmed table of 500
        // would take 1,024. (`capacity` is the room left, so removals may lower it a
        // little: the check is on the bucket count.)
        let mut set: HashSet<u64> = (0..1_000).collect();
        set.retain(|k| *k < 500);
        trim(&mut set);
        assert!(set.capacity() > 1_024, "over a quarter full");
        let mut small: HashSet<u64> = (0..50).collect();
        let small_before = small.capacity();
        small.clear();
        trim(&mut small);
        assert_eq!(small.capacity(), small_before, "too small to bother");
    }
}
