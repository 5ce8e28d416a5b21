//! Running another command from inside a module command (`LOCK.GUARD`, `LOCK.FENCED`)
//! and forwarding its reply unchanged.
//!
//! The call runs as the calling user (`C`: ACL command and key permissions apply), in
//! script mode (`S`: what a script may not call is refused), refusing writes that would
//! need memory under `maxmemory` (`M`), replicating its own effects (`!`), and replying
//! in the caller's protocol (`0`: a RESP3 client gets maps and doubles, as from the
//! command itself). Servers
//! from 7.2 on also return a refusal as an error reply with their own wording (`E`);
//! on 7.0 a refusal is only an `errno`, which is worded here the way the newer servers
//! word it, so every server answers alike.
//!
//! Valkey 9.1 returns an empty reply for some failed writes (`GETDEL`/`GETSET` on a key
//! of another type) and leaves the error for the *next* module call, which then sees
//! it instead of its own reply. Every reply is checked: an empty one is recovered from
//! the server with `PING`s, so that no reply goes missing or to another call.

use std::ffi::{c_char, c_int};

use redis_module::{raw, Context, RedisError, RedisResult, RedisString, RedisValue};

use super::server;

/// Redis 7.2.0 as `RedisModule_GetServerVersion` encodes it: the first with `E`.
const ERRORS_AS_REPLIES_SINCE: c_int = 0x0007_0200;

fn errors_as_replies() -> bool {
    // SAFETY: a plain accessor of the server's version.
    let version = unsafe { api!(RedisModule_GetServerVersion)() };
    version >= ERRORS_AS_REPLIES_SINCE
}

/// The reply of a command that ran, owned until it is forwarded.
pub struct Called(*mut raw::RedisModuleCallReply);

impl Called {
    fn kind(&self) -> c_int {
        // SAFETY: a live call reply.
        unsafe { api!(RedisModule_CallReplyType)(self.0) }
    }

    /// Whether the command answered an error (it changed nothing, as Redis commands
    /// fail before they write).
    pub fn is_error(&self) -> bool {
        self.kind() == raw::REDISMODULE_REPLY_ERROR as c_int
    }

    /// Sends the reply, unchanged, as this command's reply.
    pub fn forward(self, ctx: &Context) -> RedisResult {
        // SAFETY: a live call reply on a live context; freed by Drop.
        unsafe { api!(RedisModule_ReplyWithCallReply)(ctx.ctx, self.0) };
        Ok(RedisValue::NoReply)
    }
}

impl Drop for Called {
    fn drop(&mut self) {
        // SAFETY: freed exactly once, here.
        unsafe { api!(RedisModule_FreeCallReply)(self.0) };
    }
}

/// Runs `argv` (command name first) and sends its reply as this command's reply.
pub fn call_and_forward(ctx: &Context, argv: &[RedisString]) -> RedisResult {
    call(ctx, argv)?.forward(ctx)
}

/// Runs `argv` (command name first), replicating its effects; a refusal is this
/// command's error.
pub fn call(ctx: &Context, argv: &[RedisString]) -> Result<Called, RedisError> {
    let [command, args @ ..] = argv else {
        return Err(RedisError::WrongArity);
    };
    // The name goes to Redis as a C string: one with a NUL inside would name another
    // command, so it is unknown, as it is to Redis.
    if command.as_slice().contains(&0) {
        return Err(RedisError::String(refusal(ctx, ENOENT, command, args)));
    }
    let mut name = command.as_slice().to_vec();
    name.push(0);
    let format: &[u8] = if errors_as_replies() {
        b"vCSME!0\0"
    } else {
        b"vCSM!0\0"
    };
    let mut raw_args: Vec<*mut raw::RedisModuleString> = args.iter().map(|arg| arg.inner).collect();
    // SAFETY: the format's `v` takes an argument vector and its length; the strings are
    // alive for the call, and the name and format are NUL-terminated.
    let reply = unsafe {
        api!(RedisModule_Call)(
            ctx.ctx,
            name.as_ptr().cast::<c_char>(),
            format.as_ptr().cast::<c_char>(),
            raw_args.as_mut_ptr(),
            raw_args.len(),
        )
    };
    if reply.is_null() {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(RedisError::String(refusal(ctx, errno, command, args)));
    }
    let called = Called(reply);
    if called.kind() == raw::REDISMODULE_REPLY_UNKNOWN as c_int {
        return recover_lost_reply(ctx, command);
    }
    Ok(called)
}

/// How many `PING`s may be needed until the server answers one with its own reply.
const RECOVERY_PINGS: usize = 3;

/// The command's reply went missing (Valkey 9.1): the server hands it to the next
/// call, so `PING`s take it back until one answers `PONG`. The lost reply is the
/// first error they return; if none came back, the command is answered with an error
/// saying so, never with nothing.
fn recover_lost_reply(ctx: &Context, command: &RedisString) -> Result<Called, RedisError> {
    let mut lost: Option<Called> = None;
    for _ in 0..RECOVERY_PINGS {
        let Some(pong) = ping(ctx) else { break };
        if pong.is_error() {
            lost.get_or_insert(pong);
            continue;
        }
        if pong.kind() == raw::REDISMODULE_REPLY_STRING as c_int {
            break;
        }
    }
    lost.ok_or_else(|| {
        let name = String::from_utf8_lossy(command.as_slice()).to_lowercase();
        RedisError::String(format!("ERR the server lost the reply of '{name}'"))
    })
}

fn ping(ctx: &Context) -> Option<Called> {
    let format: &[u8] = if errors_as_replies() { b"E\0" } else { b"\0" };
    // SAFETY: a plain call without arguments; name and format are NUL-terminated.
    let reply = unsafe {
        api!(RedisModule_Call)(ctx.ctx, c"PING".as_ptr(), format.as_ptr().cast::<c_char>())
    };
    (!reply.is_null()).then_some(Called(reply))
}

/// `errno` of an unknown command.
const ENOENT: i32 = 2;

/// Redis's wording of a refused call (servers before 7.2 give only `errno`).
fn refusal(ctx: &Context, errno: i32, command: &RedisString, args: &[RedisString]) -> String {
    let spelled = String::from_utf8_lossy(command.as_slice());
    let name = spelled.to_lowercase();
    match errno {
        ENOENT => {
            let shown: String = args
                .iter()
                .map(|arg| format!("'{}' ", String::from_utf8_lossy(arg.as_slice())))
                .collect::<String>()
                .chars()
                .take(128)
                .collect();
            format!("ERR unknown command '{spelled}', with args beginning with: {shown}")
        }
        libc_errno::EINVAL => format!("ERR wrong number of arguments for '{name}' command"),
        // Script mode refuses a write on a read-only replica with the same errno as a
        // command scripts may not run; the replica's flags tell them apart.
        libc_errno::ESPIPE if server::read_only_replica(ctx) => {
            "READONLY You can't write against a read only replica.".into()
        }
        libc_errno::ESPIPE => format!("ERR command '{name}' is not allowed on script mode"),
        libc_errno::ENOSPC => "OOM command not allowed when used memory > 'maxmemory'.".into(),
        libc_errno::EACCES => {
            format!("NOPERM this user has no permissions to run the '{name}' command or to access one of its keys")
        }
        libc_errno::EROFS => {
            "CLUSTERDOWN The cluster is down and only accepts read commands".into()
        }
        libc_errno::ENETDOWN => "CLUSTERDOWN The cluster is down".into(),
        other => format!("ERR '{name}' could not run here (errno {other})"),
    }
}

/// The `errno` values RM_Call sets (Linux numbering, the servers' platform).
mod libc_errno {
    pub const EACCES: i32 = 13;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const ESPIPE: i32 = 29;
    pub const EROFS: i32 = 30;
    pub const ENETDOWN: i32 = 100;
}
