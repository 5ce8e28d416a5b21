//! Which keys may hold holdings of a session: the index behind `LOCK.KEEPALIVE`,
//! `LOCK.CLOSE` and `LOCK.HELD`. Pure, generic over the key (the module's is a database
//! and a name).
//!
//! The holdings themselves are the truth (a session is a label on them, carried by
//! persistence, replication and `MIGRATE`); this index only says where to look, so it
//! may name a key that no longer holds anything of the session (a shared holder
//! released while the key stays, a `FLUSHALL`): whoever reads it checks the key and
//! tells the index to forget what it no longer finds (`forget`). What it must never do
//! is miss a key that holds something of the session, so every path that writes a
//! holding with a session, or brings one in (a load, `RESTORE`, `RENAME`), adds to it.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::capacity::trim;

/// Sessions by name, each with the keys that may hold its holdings.
#[derive(Debug)]
pub struct SessionIndex<K> {
    sessions: HashMap<Box<[u8]>, Keys<K>>,
}

/// A session's keys: most sessions of a worker that holds one lock have one, kept
/// without a table of its own (a one-entry set costs over a hundred bytes).
#[derive(Debug)]
enum Keys<K> {
    One(K),
    Many(HashSet<K>),
}

impl<K: Hash + Eq + Clone> Keys<K> {
    fn len(&self) -> usize {
        match self {
            Keys::One(_) => 1,
            Keys::Many(keys) => keys.len(),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &K> + '_> {
        match self {
            Keys::One(one) => Box::new(std::iter::once(one)),
            Keys::Many(keys) => Box::new(keys.iter()),
        }
    }

    fn insert(&mut self, key: &K) {
        match self {
            Keys::One(one) if one == key => {}
            Keys::One(one) => *self = Keys::Many(HashSet::from([one.clone(), key.clone()])),
            Keys::Many(keys) => {
                if !keys.contains(key) {
                    keys.insert(key.clone());
                }
            }
        }
    }

    /// Removes `key`; false when nothing is left.
    fn remove(&mut self, key: &K) -> bool {
        match self {
            Keys::One(one) => one != key,
            Keys::Many(keys) => {
                keys.remove(key);
                match keys.len() {
                    0 => false,
                    1 => {
                        if let Some(last) = keys.iter().next().cloned() {
                            *self = Keys::One(last);
                        }
                        true
                    }
                    _ => {
                        trim(keys);
                        true
                    }
                }
            }
        }
    }

    /// Keeps the keys `keep` says so of; false when nothing is left.
    fn retain(&mut self, keep: impl Fn(&K) -> bool) -> bool {
        match self {
            Keys::One(one) => keep(one),
            Keys::Many(keys) => {
                keys.retain(|key| keep(key));
                !keys.is_empty()
            }
        }
    }
}

impl<K> Default for SessionIndex<K> {
    fn default() -> Self {
        SessionIndex {
            sessions: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> SessionIndex<K> {
    /// `key` holds something of `session` now.
    pub fn add(&mut self, session: &[u8], key: &K) {
        match self.sessions.get_mut(session) {
            Some(keys) => keys.insert(key),
            None => {
                self.sessions.insert(session.into(), Keys::One(key.clone()));
            }
        }
    }

    /// `key` holds nothing of `session` any more.
    pub fn forget(&mut self, session: &[u8], key: &K) {
        let Some(keys) = self.sessions.get_mut(session) else {
            return;
        };
        if !keys.remove(key) {
            self.sessions.remove(session);
            trim(&mut self.sessions);
        }
    }

    /// Forgets every key `gone` says so of (a flushed database).
    pub fn forget_keys(&mut self, gone: impl Fn(&K) -> bool) {
        self.sessions
            .retain(|_, keys| keys.retain(|key| !gone(key)));
        trim(&mut self.sessions);
    }

    /// Renames keys in place (`SWAPDB`): each key `rename` maps to another.
    pub fn rename_keys(&mut self, rename: impl Fn(&K) -> Option<K>) {
        for keys in self.sessions.values_mut() {
            let renamed: Vec<K> = keys
                .iter()
                .map(|key| rename(key).unwrap_or_else(|| key.clone()))
                .collect();
            *keys = match renamed.as_slice() {
                [one] => Keys::One(one.clone()),
                _ => Keys::Many(renamed.into_iter().collect()),
            };
        }
    }

    /// The keys that may hold holdings of `session`.
    pub fn keys(&self, session: &[u8]) -> Vec<K> {
        self.sessions
            .get(session)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether `session` may hold anything here (a key in the index).
    pub fn may_hold(&self, session: &[u8]) -> bool {
        self.sessions.contains_key(session)
    }

    /// Sessions with at least one key here.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Keys indexed across all sessions.
    pub fn entries(&self) -> usize {
        self.sessions.values().map(Keys::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_added_once_and_forgotten_with_their_session() {
        let mut index = SessionIndex::default();
        index.add(b"s", &"a");
        index.add(b"s", &"a");
        index.add(b"s", &"b");
        index.add(b"t", &"a");
        let mut keys = index.keys(b"s");
        keys.sort();
        assert_eq!(keys, vec!["a", "b"]);
        assert_eq!((index.sessions(), index.entries()), (2, 3));
        index.forget(b"s", &"a");
        index.forget(b"s", &"b");
        assert_eq!((index.keys(b"t"), index.keys(b"s")), (vec!["a"], vec![]));
        index.forget(b"s", &"b");
        assert!(index.keys(b"s").is_empty());
        assert!(!index.may_hold(b"s") && index.may_hold(b"t"));
        assert_eq!(index.sessions(), 1);
        assert_eq!(index.keys(b"t"), vec!["a"]);
    }

    #[test]
    fn a_flush_forgets_keys_and_a_swap_renames_them() {
        let mut index = SessionIndex::default();
        index.add(b"s", &(0, "a"));
        index.add(b"s", &(1, "b"));
        index.add(b"t", &(1, "c"));
        index.rename_keys(|&(db, name)| match db {
            0 => Some((1, name)),
            1 => Some((0, name)),
            _ => None,
        });
        let mut keys = index.keys(b"s");
        keys.sort();
        assert_eq!(keys, vec![(0, "b"), (1, "a")]);
        index.forget_keys(|&(db, _)| db == 0);
        assert_eq!(index.keys(b"s"), vec![(1, "a")]);
        assert!(index.keys(b"t").is_empty());
        assert_eq!(index.sessions(), 1);
    }
}
