//! The note of the lock key Redis most recently unlinked.
//!
//! Redis tells the data type that one of its keys is being unlinked just before it
//! announces *why* (`expired`, `del`, `evicted`). The note is matched against the next
//! announcement, which is how an expired lease is told apart from an expired key of
//! another type: by then the key is already gone. A note lives only as long as the
//! command (or expiry cycle) that made it: the command filter and the event loop going
//! to sleep end it, so an overwrite (`SET` over a lock, which Redis announces in a class
//! the module does not follow) is never taken for a later expiry.

use std::cell::RefCell;

/// The lock key most recently unlinked, as (db, name), and how many holders it had
/// (each one's lease ends with the key's when it expires). The buffer is reused so that
/// noting a deletion does not allocate on every release.
struct Unlinked {
    noted: bool,
    db: i32,
    name: Vec<u8>,
    holders: usize,
}

thread_local! {
    static LAST_UNLINKED: RefCell<Unlinked> = const {
        RefCell::new(Unlinked { noted: false, db: 0, name: Vec::new(), holders: 0 })
    };
}

/// A lock key is going away (the data type's unlink callback).
pub fn note(db: i32, name: &[u8], holders: usize) {
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        last.noted = true;
        last.db = db;
        last.holders = holders;
        last.name.clear();
        last.name.extend_from_slice(name);
    });
}

/// The command (or cycle) that unlinked it is over, or the deletion was our own.
pub fn forget() {
    LAST_UNLINKED.with(|last| last.borrow_mut().noted = false);
}

/// When the key Redis just announced is the lock key it just unlinked, how many
/// holders it had; the note is used up either way.
pub fn unlinked_holders(db: i32, name: &[u8]) -> Option<usize> {
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        let matched = last.noted && last.db == db && last.name == name;
        last.noted = false;
        matched.then_some(last.holders)
    })
}
