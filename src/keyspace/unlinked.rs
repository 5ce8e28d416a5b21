//! The note of the lock key or fence mark Redis most recently unlinked.
//!
//! Redis tells a data type that one of its keys is being unlinked just before it
//! announces *why* (`expired`, `del`, `evicted`). The note is matched against the next
//! announcement, which is how an expired lease is told apart from an expired key of
//! another type, and an evicted mark from a deleted one: by then the key is already
//! gone. A note lives only as long as the command (or expiry or eviction cycle) that
//! made it: the command filter and the event loop going to sleep end it, so an
//! overwrite (`SET` over a lock, which Redis announces in a class the module does not
//! follow) is never taken for a later expiry.

use std::cell::RefCell;

/// What the unlinked key was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// A lock with this many holders (each one's lease ends with the key's when it
    /// expires).
    Lock { holders: usize },
    /// A fence mark that had admitted this fence.
    Mark { fence: u64 },
}

/// The key most recently unlinked, as (db, name), and what it was. The buffers are
/// reused so that noting a deletion does not allocate on every release.
struct Unlinked {
    noted: bool,
    db: i32,
    name: Vec<u8>,
    gone: Gone,
    /// How long each of a lock's holdings had lasted (µs) when it was unlinked, for
    /// the hold distribution once Redis says the key expired or was deleted.
    held_us: Vec<u64>,
}

thread_local! {
    static LAST_UNLINKED: RefCell<Unlinked> = const {
        RefCell::new(Unlinked {
            noted: false,
            db: 0,
            name: Vec::new(),
            gone: Gone::Lock { holders: 0 },
            held_us: Vec::new(),
        })
    };
}

/// A lock key or mark is going away (a data type's unlink callback).
pub fn note(db: i32, name: &[u8], gone: Gone) {
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        last.noted = true;
        last.db = db;
        last.gone = gone;
        last.name.clear();
        last.name.extend_from_slice(name);
        last.held_us.clear();
    });
}

/// With `note` of a lock: how long each of its holdings had lasted.
pub fn note_held(held_us: impl IntoIterator<Item = u64>) {
    LAST_UNLINKED.with(|last| last.borrow_mut().held_us.extend(held_us));
}

/// Each holding's length noted with the lock last taken (`take`).
pub fn each_held(mut f: impl FnMut(u64)) {
    LAST_UNLINKED.with(|last| last.borrow().held_us.iter().for_each(|us| f(*us)));
}

/// The command (or cycle) that unlinked it is over, or the deletion was our own.
pub fn forget() {
    LAST_UNLINKED.with(|last| last.borrow_mut().noted = false);
}

/// When the key Redis just announced is the one it just unlinked, what it was; the
/// note is used up either way.
pub fn take(db: i32, name: &[u8]) -> Option<Gone> {
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        let matched = last.noted && last.db == db && last.name == name;
        last.noted = false;
        matched.then_some(last.gone)
    })
}
