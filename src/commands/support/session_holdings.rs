//! What `LOCK.KEEPALIVE`, `LOCK.CLOSE` and `LOCK.HELD` share: the holdings of a session
//! on this server, found through the index and checked key by key (a key that holds
//! nothing of the session any more is forgotten there), the calling user's permission
//! for every key they name (Redis cannot check keys a command does not name), and the
//! database each key is in (the client's own is restored afterwards).

use std::collections::HashMap;

use fencelock_core::args::parse_session;
use fencelock_core::error::{no_permission, CommandError};
use fencelock_core::holding::MAX_TOKEN_BYTES;
use fencelock_core::lock;
use fencelock_core::mode::Mode;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisError, RedisString};

use crate::blocking;
use crate::ffi::acl::{AsCommand, CallingUser};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server::{select_db, selected_db};
use crate::ffi::server_clock;
use crate::keyspace::effects::{self, Change};
use crate::keyspace::sessions::{self, SessionKey};

/// One live holding of the session.
pub struct Found {
    pub key: SessionKey,
    pub token: Vec<u8>,
    pub fence: u64,
    pub mode: Mode,
    /// Its lease's end (Unix ms), `None` for a lock made permanent (`PERSIST`).
    pub deadline_ms: Option<i64>,
    /// How much longer its key (or room) lasts once the lease ends.
    pub lock_delay_ms: u64,
}

/// The session argument: any a holding can carry, so that a session acquired under a
/// larger `fencelock.max-token-length` is still kept alive, listed and closed (one that
/// holds nothing here simply finds nothing).
pub fn parse(session: &RedisString) -> Result<&[u8], CommandError> {
    parse_session(session.as_slice(), MAX_TOKEN_BYTES)
}

/// The live holdings of `session` on this server, in grant order (ascending fence).
pub fn holdings(ctx: &Context, session: &[u8]) -> Vec<Found> {
    let now_ms = server_clock::command_ms();
    let mut found = Vec::new();
    let keys = sessions::keys_of(session).into_iter().map(|key| (key, ()));
    in_each_db(ctx, keys, |ctx, key, ()| {
        let before = found.len();
        let name = RedisString::create_from_slice(ctx.ctx, &key.1);
        let open = LockKey::open(ctx, &name, false);
        match open.lock() {
            Ok(Some(LockRef::Exclusive(holding))) if holding.in_session(Some(session)) => {
                let deadline_ms = open.lease_deadline_ms();
                found.push(Found {
                    key: key.clone(),
                    token: holding.token().into_owned(),
                    fence: holding.fence(),
                    mode: Mode::Exclusive,
                    deadline_ms,
                    lock_delay_ms: holding.lock_delay_ms(),
                });
            }
            Ok(Some(LockRef::Shared(set))) => {
                let held = set
                    .all()
                    .filter(|holder| holder.is_live(now_ms))
                    .filter(|holder| holder.holding().in_session(Some(session)));
                for holder in held {
                    found.push(Found {
                        key: key.clone(),
                        token: holder.holding().token().into_owned(),
                        fence: holder.holding().fence(),
                        mode: set.mode(),
                        deadline_ms: Some(holder.deadline_ms()),
                        lock_delay_ms: holder.holding().lock_delay_ms(),
                    });
                }
            }
            _ => {}
        }
        if found.len() == before {
            sessions::forget(session, key);
        }
    });
    found.sort_unstable_by_key(|holding| holding.fence);
    found
}

/// Refuses the command unless the calling user may run `command` on every key of
/// `found`, and on every one of `also` (keys it would touch besides): Redis's `NOPERM`
/// reply, naming the first key refused.
pub fn check_permissions(
    ctx: &Context,
    found: &[Found],
    also: &[Vec<u8>],
    command: AsCommand,
) -> Result<(), RedisError> {
    let Some(user) = CallingUser::of(ctx) else {
        return Ok(());
    };
    let mut names = found
        .iter()
        .map(|holding| &*holding.key.1)
        .chain(also.iter().map(Vec::as_slice));
    match names.find(|name| !user.may(name, command)) {
        Some(refused) => Err(RedisError::String(no_permission(user.name(), refused))),
        None => Ok(()),
    }
}

/// Runs `each` on every item with the database of its key selected, then selects the
/// client's own database again.
pub fn in_each_db<T>(
    ctx: &Context,
    items: impl IntoIterator<Item = (SessionKey, T)>,
    mut each: impl FnMut(&Context, &SessionKey, T),
) {
    let own_db = selected_db(ctx);
    let mut current = own_db;
    for (key, item) in items {
        if key.0 != current {
            if !select_db(ctx, key.0) {
                continue;
            }
            current = key.0;
        }
        each(ctx, &key, item);
    }
    if current != own_db {
        select_db(ctx, own_db);
    }
}

/// Runs `change` on each holding of `found` that still holds (the key open for writing,
/// its ended shared holders dropped first), key by key in grant order; returns how many
/// it changed. What `LOCK.KEEPALIVE` and `LOCK.CLOSE` do to each.
pub fn change_each(
    ctx: &Context,
    found: Vec<Found>,
    mut change: impl FnMut(&Context, &mut LockKey, &[u8]) -> Result<Change, CommandError>,
) -> i64 {
    let now_ms = server_clock::command_ms();
    let mut changed = 0;
    in_each_db(ctx, by_key(found), |ctx, key, holdings| {
        let name = RedisString::create_from_slice(ctx.ctx, &key.1);
        let mut open = LockKey::open(ctx, &name, true);
        if effects::drop_ended(ctx, &mut open, now_ms).is_err() {
            return;
        }
        for holding in holdings {
            if !lock::is_holder(open.lock().ok().flatten(), &holding.token, now_ms) {
                continue;
            }
            if let Ok(done) = change(ctx, &mut open, &holding.token) {
                blocking::after(ctx, &mut open, done);
                changed += 1;
            }
        }
    });
    changed
}

/// The holdings grouped by key, each group where its first holding stands.
fn by_key(found: Vec<Found>) -> Vec<(SessionKey, Vec<Found>)> {
    let mut groups: Vec<(SessionKey, Vec<Found>)> = Vec::new();
    let mut at: HashMap<SessionKey, usize> = HashMap::new();
    for holding in found {
        match at
            .get(&holding.key)
            .and_then(|&index| groups.get_mut(index))
        {
            Some((_, group)) => group.push(holding),
            None => {
                at.insert(holding.key.clone(), groups.len());
                groups.push((holding.key.clone(), vec![holding]));
            }
        }
    }
    groups
}
