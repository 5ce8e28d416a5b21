//! The command table: each command's entry point and flags, and what Redis is told
//! beyond them: arity, a summary, the key spec (read-only for `LOCK.FENCE`/`LOCK.INFO`,
//! so `%R~pattern` ACL users may call them), and ACL categories where the server
//! supports them (7.2 for the standard ones, 7.4 for the module's own `fencelock`).

use std::ffi::{c_int, CStr, CString};

use redis_module::{raw, Context, Status};

use crate::dispatch;

/// One command: what Redis needs to register it and to describe it.
struct CommandMeta {
    name: &'static str,
    entry: raw::RedisModuleCmdFunc,
    /// Command flags (`write deny-oom fast`, …).
    flags: &'static CStr,
    /// ACL categories, beyond the module's own `fencelock` category.
    categories: &'static str,
    summary: &'static str,
    /// Redis convention: N exactly, -N at least N (counting the command name).
    arity: c_int,
    /// Key-spec flags of the key at position 1.
    key_flags: u32,
}

const RO: u32 = raw::REDISMODULE_CMD_KEY_RO;
const RW: u32 = raw::REDISMODULE_CMD_KEY_RW;
const OW: u32 = raw::REDISMODULE_CMD_KEY_OW;
const ACCESS: u32 = raw::REDISMODULE_CMD_KEY_ACCESS;
const UPDATE: u32 = raw::REDISMODULE_CMD_KEY_UPDATE;
const DELETE: u32 = raw::REDISMODULE_CMD_KEY_DELETE;

const COMMANDS: [CommandMeta; 6] = [
    CommandMeta {
        name: "lock.acquire",
        entry: Some(dispatch::acquire),
        flags: c"write deny-oom fast",
        categories: "write fast",
        summary:
            "Acquires a lock for ttl-ms, optionally waiting in FIFO order; returns [token, fence].",
        arity: -3,
        key_flags: RW | ACCESS | UPDATE,
    },
    CommandMeta {
        name: "lock.refresh",
        entry: Some(dispatch::refresh),
        flags: c"write deny-oom fast",
        categories: "write fast",
        summary: "Extends the lease of a lock held by token (with ADD: by ttl-ms past its end).",
        arity: -4,
        key_flags: RW | UPDATE,
    },
    CommandMeta {
        name: "lock.release",
        entry: Some(dispatch::release),
        flags: c"write fast",
        categories: "write fast",
        summary: "Releases a lock held by token, handing it to the first waiter.",
        arity: 3,
        key_flags: RW | DELETE,
    },
    CommandMeta {
        name: "lock.fence",
        entry: Some(dispatch::fence),
        flags: c"readonly fast",
        categories: "read fast",
        summary: "Returns the fence of the current holding.",
        arity: -2,
        key_flags: RO | ACCESS,
    },
    CommandMeta {
        name: "lock.info",
        entry: Some(dispatch::info),
        flags: c"readonly fast",
        categories: "read fast",
        summary: "Returns whether a lock is held, its fence, remaining ttl and waiters.",
        arity: 2,
        key_flags: RO,
    },
    CommandMeta {
        name: "lock.apply",
        entry: Some(dispatch::apply),
        flags: c"write deny-oom fast",
        categories: "write fast",
        summary: "Writes an explicit holding (the replicated form of a grant).",
        arity: -4,
        key_flags: OW | UPDATE,
    },
];

/// Registers and describes every command; called once during load. The key is always
/// argument 1 (first = last = 1, step 1), which also routes commands in a cluster.
pub fn register_all(ctx: &Context) -> Status {
    let Some(create) = api!(RedisModule_CreateCommand) else {
        return Status::Err;
    };
    for command in &COMMANDS {
        let Ok(name) = CString::new(command.name) else {
            return Status::Err;
        };
        // SAFETY: static entry point and C strings; called during load.
        let created = unsafe {
            create(
                ctx.ctx,
                name.as_ptr(),
                command.entry,
                command.flags.as_ptr(),
                1,
                1,
                1,
            )
        };
        if created != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!("fencelock: could not create {}", command.name));
            return Status::Err;
        }
        describe(ctx, command);
    }
    set_acl_categories(ctx);
    Status::Ok
}

fn command_handle(ctx: &Context, name: &str) -> Option<*mut raw::RedisModuleCommand> {
    let get_command = api!(RedisModule_GetCommand)?;
    let name = CString::new(name).ok()?;
    // SAFETY: the command was registered by the module table before init runs.
    let handle = unsafe { get_command(ctx.ctx, name.as_ptr()) };
    (!handle.is_null()).then_some(handle)
}

/// Registers arity, summary and the key spec (key at index 1, one key). Redis copies
/// everything it is given, so the structures can live on the stack.
fn describe(ctx: &Context, command: &CommandMeta) {
    let (Some(set_info), Some(handle), Ok(summary), Ok(since)) = (
        api!(RedisModule_SetCommandInfo),
        command_handle(ctx, command.name),
        CString::new(command.summary),
        CString::new(env!("CARGO_PKG_VERSION")),
    ) else {
        return;
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: all-zero is the documented terminator of a key-spec array.
    let terminator: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let mut key_specs = [
        raw::RedisModuleCommandKeySpec {
            notes: std::ptr::null(),
            flags: u64::from(command.key_flags),
            begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
            },
            find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        },
        terminator,
    ];
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: summary.as_ptr(),
        complexity: c"O(1)".as_ptr(),
        since: since.as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: command.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: std::ptr::null_mut(),
    };
    // SAFETY: `info` and everything it points to outlive the call; Redis copies them.
    if unsafe { set_info(handle, &info) } != raw::REDISMODULE_OK as c_int {
        ctx.log_warning(&format!("fencelock: could not describe {}", command.name));
    }
}

/// Redis 7.2 lets modules put commands in categories, 7.4 lets them add their own
/// (`+@fencelock`). On older servers module commands belong to no category.
fn set_acl_categories(ctx: &Context) {
    let Some(set_categories) = api!(RedisModule_SetCommandACLCategories) else {
        return;
    };
    let own_category = api!(RedisModule_AddACLCategory).is_some_and(|add| {
        // SAFETY: called during load with a valid C string.
        unsafe { add(ctx.ctx, c"fencelock".as_ptr()) == raw::REDISMODULE_OK as c_int }
    });
    for command in &COMMANDS {
        let categories = if own_category {
            format!("{} fencelock", command.categories)
        } else {
            command.categories.to_string()
        };
        let (Some(handle), Ok(categories)) =
            (command_handle(ctx, command.name), CString::new(categories))
        else {
            continue;
        };
        // SAFETY: a registered command handle and a valid C string, during load.
        if unsafe { set_categories(handle, categories.as_ptr()) } != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "fencelock: could not set ACL categories of {}",
                command.name
            ));
        }
    }
}
