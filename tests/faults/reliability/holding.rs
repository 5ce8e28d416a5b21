//! What the history proves about one holding: its grant, and the refreshes and the
//! release its holder later sent for the same token. Exclusive, shared and semaphore
//! holdings alike: every holder has its own token and its own lease.
//!
//! Bounds are conservative in the direction that cannot invent an anomaly: the server
//! granted somewhere between invoke and completion, so a lease certainly lasted until
//! `invoke + ttl` and certainly ended by `completion + ttl` (Redis keeps a key alive
//! while `now <= deadline`, deadlines in whole milliseconds of the same wall clock).

use super::history::Op;

pub struct Holding<'a> {
    pub grant: &'a Op,
    /// The refreshes and releases of the grant's token by its holder, in the order sent.
    pub follow_ups: Vec<&'a Op>,
}

impl<'a> Holding<'a> {
    /// `grant` with its follow-ups among `ops_of_key` (the operations on its key).
    pub fn new(grant: &'a Op, ops_of_key: &[&'a Op]) -> Self {
        let token = grant.token();
        let mut follow_ups: Vec<&Op> = ops_of_key
            .iter()
            .copied()
            .filter(|op| {
                op.client == grant.client
                    && (op.is_refresh() || op.is_release())
                    && op.token() == token
                    && op.invoked_us >= grant.invoked_us
            })
            .collect();
        follow_ups.sort_by_key(|op| op.invoked_us);
        Holding { grant, follow_ups }
    }

    /// The release the holder sent, whatever came back.
    pub fn release(&self) -> Option<&'a Op> {
        self.follow_ups.iter().copied().find(|op| op.is_release())
    }

    /// The acknowledged refreshes sent before the release.
    fn acked_refreshes(&self) -> impl Iterator<Item = &'a Op> + '_ {
        self.follow_ups
            .iter()
            .copied()
            .take_while(|op| !op.is_release())
            .filter(|op| op.acked_yes())
    }

    /// The earliest end (ms) the server can have given the lease: request start plus ttl
    /// of the grant and of every acknowledged refresh (a refresh that succeeded proves
    /// the lease had not lapsed: nothing revives a lapsed lease).
    pub fn certain_deadline_ms(&self) -> i64 {
        self.acked_refreshes()
            .chain([self.grant])
            .map(|op| op.invoked_us / 1_000 + op.ttl_ms().unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    /// When the holder last heard that its lease was live: the reply to the grant or to
    /// its latest acknowledged refresh.
    pub fn last_ack_us(&self) -> i64 {
        self.acked_refreshes()
            .map(|op| op.completed_us)
            .fold(self.grant.completed_us, i64::max)
    }

    /// The interval during which the grant was certainly held and relied on: from its
    /// reply until its holder sent a release (whatever came back: from then on the
    /// holder claims nothing, and the release may have freed the lock), or until its
    /// latest certain deadline.
    pub fn certainly_held(&self) -> (i64, i64) {
        let proven_until = self
            .acked_refreshes()
            .map(|op| op.invoked_us)
            .fold(self.grant.completed_us, i64::max);
        let lease_end = proven_until.max(self.certain_deadline_ms() * 1_000);
        let end = match self.release() {
            // An acknowledged release proves the lease lasted until it was sent.
            Some(release) if release.acked_yes() => release.invoked_us,
            Some(release) => release.invoked_us.min(lease_end),
            None => lease_end,
        };
        (self.grant.completed_us, end)
    }
}
