//! Module timers with typed data. Each kind of timer is a type implementing `Timer`:
//! Redis hands its value back to `fire` exactly once, or to `stop`'s caller; `fire`
//! runs inside the guard. (redis-module's own timer wrapper cannot stop a timer and
//! get its data back with the right type, and runs the callback unguarded.)

use std::cell::Cell;
use std::ffi::c_void;
use std::time::Duration;

use redis_module::{raw, Context};

use super::main_thread::MainThread;
use super::panic_guard;

/// What a timer carries and does when it fires.
pub trait Timer: Sized + 'static {
    /// For the guard's report.
    const NAME: &'static str;
    fn fire(self, ctx: &Context);
}

/// A running timer, for `stop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerId(raw::RedisModuleTimerID);

/// The longest delay a timer is started with; one asked to wait longer fires after this,
/// and every kind of timer then looks whether its moment has come and starts again.
/// When a module timer fires, Redis 7.0 re-arms its timer event for the next one with
/// `now + ms * 1000` computed in an `int`: a timer more than 2^31 µs (~35.8 minutes)
/// away overflows it into the past, and the event loop spins at 100% CPU.
pub const LONGEST_DELAY_MS: i64 = 30 * 60 * 1000;

/// Starts `timer`, to fire after `delay` (or after `LONGEST_DELAY_MS`, if sooner).
pub fn start<T: Timer>(ctx: &Context, delay: Duration, timer: T) -> TimerId {
    let delay = i64::try_from(delay.as_millis())
        .unwrap_or(i64::MAX)
        .min(LONGEST_DELAY_MS);
    let data = Box::into_raw(Box::new(timer));
    // SAFETY: Redis hands `data` back to `fired::<T>` exactly once, or through
    // StopTimer to `stop::<T>`; both turn it back into the Box made here.
    TimerId(unsafe { api!(RedisModule_CreateTimer)(ctx.ctx, delay, Some(fired::<T>), data.cast()) })
}

/// Stops a timer that has not fired yet and returns what it carried; `None` when it
/// already fired (or never existed).
pub fn stop<T: Timer>(ctx: &Context, id: TimerId) -> Option<T> {
    if is_firing(ctx, id) {
        // Redis frees a firing timer after its callback returns; stopping it inside
        // the callback would free it (and what it carried) twice.
        return None;
    }
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: a timer id of this module; Redis writes its data pointer into `data`.
    let stopped = unsafe { api!(RedisModule_StopTimer)(ctx.ctx, id.0, &mut data) }
        == raw::REDISMODULE_OK as i32;
    // SAFETY: `id` was started by `start::<T>`, so `data` is a `Box<T>`.
    (stopped && !data.is_null()).then(|| *unsafe { Box::from_raw(data.cast::<T>()) })
}

/// What the timer whose callback runs now carried (null: none runs).
static FIRING: MainThread<Cell<*mut c_void>> = MainThread::new(|| Cell::new(std::ptr::null_mut()));

/// Whether `id` is the timer whose callback is running.
fn is_firing(ctx: &Context, id: TimerId) -> bool {
    let firing = FIRING.with(Cell::get);
    if firing.is_null() {
        return false;
    }
    let (mut remaining, mut data): (u64, *mut c_void) = (0, std::ptr::null_mut());
    // SAFETY: a timer id of this module; Redis only reads its data pointer out.
    let found = unsafe { api!(RedisModule_GetTimerInfo)(ctx.ctx, id.0, &mut remaining, &mut data) }
        == raw::REDISMODULE_OK as i32;
    found && data == firing
}

unsafe extern "C" fn fired<T: Timer>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: made by `start::<T>`, handed back by Redis once: the value is moved out
    // here and its allocation freed below, after the callback, so no timer started
    // meanwhile can reuse the address `is_firing` compares with.
    let timer = unsafe { std::ptr::read(data.cast::<T>()) };
    let outer = FIRING.with(|firing| firing.replace(data));
    panic_guard::callback(T::NAME, (), || timer.fire(&Context::new(ctx)));
    FIRING.with(|firing| firing.set(outer));
    // SAFETY: the allocation `start::<T>` made, its value already moved out above.
    drop(unsafe { Box::from_raw(data.cast::<std::mem::ManuallyDrop<T>>()) });
}
