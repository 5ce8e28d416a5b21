//! Running another command from inside a module command (`LOCK.GUARD`, `LOCK.FENCED`)
//! and forwarding its reply unchanged.
//!
//! The call runs as the calling user (`C`: ACL command and key permissions apply), in
//! script mode (`S`: what a script may not call is refused), refusing writes that would
//! need memory under `maxmemory` (`M`), and replicating its own effects (`!`). Servers
//! from 7.2 on also return a refusal as an error reply with their own wording (`E`);
//! on 7.0 a refusal is only an `errno`, which is worded here the way the newer servers
//! word it, so every server answers alike.

use std::ffi::{c_char, c_int};

use redis_module::{raw, Context, RedisError, RedisResult, RedisString, RedisValue};

/// Redis 7.2.0 as `RedisModule_GetServerVersion` encodes it: the first with `E`.
const ERRORS_AS_REPLIES_SINCE: c_int = 0x0007_0200;

fn errors_as_replies() -> bool {
    // SAFETY: a plain accessor of the server's version.
    let version = unsafe { api!(RedisModule_GetServerVersion)() };
    version >= ERRORS_AS_REPLIES_SINCE
}

/// Runs `argv` (command name first) and sends its reply as this command's reply.
pub fn call_and_forward(ctx: &Context, argv: &[RedisString], replicate: bool) -> RedisResult {
    let [command, args @ ..] = argv else {
        return Err(RedisError::WrongArity);
    };
    let mut name = command.as_slice().to_vec();
    name.push(0);
    let format: &[u8] = match (replicate, errors_as_replies()) {
        (true, true) => b"vCSME!\0",
        (true, false) => b"vCSM!\0",
        (false, true) => b"vCSME\0",
        (false, false) => b"vCSM\0",
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
        return Err(RedisError::String(refusal(errno, command, args)));
    }
    // SAFETY: a live call reply, forwarded as this command's reply and then freed.
    unsafe {
        api!(RedisModule_ReplyWithCallReply)(ctx.ctx, reply);
        api!(RedisModule_FreeCallReply)(reply);
    }
    Ok(RedisValue::NoReply)
}

/// Redis's wording of a refused call (servers before 7.2 give only `errno`).
fn refusal(errno: i32, command: &RedisString, args: &[RedisString]) -> String {
    let name = String::from_utf8_lossy(command.as_slice()).to_lowercase();
    match errno {
        libc_errno::ENOENT => {
            let shown: String = args
                .iter()
                .map(|arg| format!("'{}' ", String::from_utf8_lossy(arg.as_slice())))
                .collect::<String>()
                .chars()
                .take(128)
                .collect();
            format!("ERR unknown command '{name}', with args beginning with: {shown}")
        }
        libc_errno::EINVAL => format!("ERR wrong number of arguments for '{name}' command"),
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
    pub const ENOENT: i32 = 2;
    pub const EACCES: i32 = 13;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const ESPIPE: i32 = 29;
    pub const EROFS: i32 = 30;
    pub const ENETDOWN: i32 = 100;
}
