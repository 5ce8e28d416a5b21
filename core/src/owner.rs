//! Who a holding or a waiter belongs to, for deadlock detection: its session if it has
//! one, else its token. A waiter that chose neither (its token is drawn only when it is
//! granted) is an owner of its own, which holds nothing.

use crate::fifo_queue::Ticket;
use crate::holding::Holding;
use crate::mode::Mode;
use crate::value::LockRef;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Session(Vec<u8>),
    Token(Vec<u8>),
    /// A waiter with neither session nor token: the wait with this ticket.
    Alone(Ticket),
}

impl Owner {
    /// The owner of a waiter that asked with `session` and `token` (either may be
    /// missing), queued under `ticket`.
    pub fn of_waiter(session: Option<&[u8]>, token: Option<&[u8]>, ticket: Ticket) -> Owner {
        match (session, token) {
            (Some(session), _) => Owner::Session(session.to_vec()),
            (None, Some(token)) => Owner::Token(token.to_vec()),
            (None, None) => Owner::Alone(ticket),
        }
    }

    /// The owner of a holding, its token spelled as a client sends it.
    pub fn of_holding(holding: &Holding) -> Owner {
        match holding.session() {
            Some(session) => Owner::Session(session.into_owned()),
            None => Owner::Token(holding.token().into_owned()),
        }
    }
}

/// The owners of a lock's live holdings (none during a quarantine).
pub fn owners_of(lock: LockRef, now_ms: i64) -> Vec<Owner> {
    match lock {
        LockRef::Exclusive(holding) => vec![Owner::of_holding(holding)],
        LockRef::Shared(set) => set
            .all()
            .filter(|holder| holder.is_live(now_ms))
            .map(|holder| Owner::of_holding(holder.holding()))
            .collect(),
        LockRef::Quarantined(_) => Vec::new(),
    }
}

/// Whether a waiter in mode `waiting` waits for a waiter queued before it in one key's
/// queue, in mode `before` and asking for `before_keys` keys. Everybody waits for an
/// exclusive waiter and an exclusive waiter for everybody; semaphore waiters wait for
/// each other (each takes a permit the next may need). Shared waiters are served
/// together, so a shared waiter does not wait for a shared one before it, unless that
/// one asks for several keys: it stays first in this queue, and holds up the queue,
/// while it waits for its other keys (`waits_through_queued`).
pub fn waits_for_queued(waiting: Mode, before: Mode, before_keys: usize) -> bool {
    !(waiting == Mode::Shared && before == Mode::Shared && before_keys == 1)
}

/// Whether a waiter in mode `waiting` waits *through* a waiter queued before it (in mode
/// `before`, for `before_keys` keys) rather than for it: a shared waiter behind a shared
/// wait for several keys is held up until that wait is granted, and is then granted in
/// the same step (shared beside shared), so it waits for what that wait waits for (the
/// holders and queues of its keys), never for its owner's other holdings or waits. An
/// exclusive waiter between them breaks that (`deadlock`); a semaphore waiter between
/// them does not, as it is refused once that wait holds the key.
pub fn waits_through_queued(waiting: Mode, before: Mode, before_keys: usize) -> bool {
    waiting == Mode::Shared && before == Mode::Shared && before_keys > 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holding::Extras;

    #[test]
    fn a_session_owns_before_a_token() {
        assert_eq!(
            Owner::of_waiter(Some(b"s"), Some(b"t"), 1),
            Owner::Session(b"s".to_vec())
        );
        assert_eq!(
            Owner::of_waiter(None, Some(b"t"), 1),
            Owner::Token(b"t".to_vec())
        );
        assert_eq!(Owner::of_waiter(None, None, 7), Owner::Alone(7));
        let plain = Holding::pack(b"t", 5).unwrap();
        assert_eq!(Owner::of_holding(&plain), Owner::Token(b"t".to_vec()));
        let extras = Extras {
            session: Some(b"s"),
            lock_delay_ms: 0,
            value: None,
        };
        let in_session = Holding::pack_with(b"t", 5, extras).unwrap();
        assert_eq!(
            Owner::of_holding(&in_session),
            Owner::Session(b"s".to_vec())
        );
    }

    #[test]
    fn only_single_key_shared_waiters_let_shared_ones_behind_them_be() {
        assert!(!waits_for_queued(Mode::Shared, Mode::Shared, 1));
        assert!(waits_for_queued(Mode::Shared, Mode::Shared, 2));
        assert!(waits_for_queued(Mode::Shared, Mode::Exclusive, 1));
        assert!(waits_for_queued(Mode::Exclusive, Mode::Shared, 1));
        assert!(waits_for_queued(Mode::Semaphore(2), Mode::Semaphore(2), 1));
        assert!(waits_for_queued(Mode::Shared, Mode::Semaphore(2), 1));
        assert!(waits_through_queued(Mode::Shared, Mode::Shared, 2));
        assert!(!waits_through_queued(Mode::Shared, Mode::Shared, 1));
        assert!(!waits_through_queued(Mode::Exclusive, Mode::Shared, 2));
        assert!(!waits_through_queued(Mode::Shared, Mode::Exclusive, 2));
        assert!(!waits_through_queued(
            Mode::Semaphore(2),
            Mode::Semaphore(2),
            2
        ));
    }
}
