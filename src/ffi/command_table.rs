//! Registers the commands with Redis (each one's `SPEC` beside its handler in
//! `commands/`, collected in order by `lib.rs`): each command's entry point and
//! flags, and what Redis is told beyond them: arity, a summary, the key spec
//! (read-only for `LOCK.FENCE`/`LOCK.INFO`, so `%R~pattern` ACL users may call them),
//! and ACL categories where the server supports them (7.2 for the standard ones, 7.4
//! for the module's own `fencelock`).

use std::ffi::{c_int, CStr, CString};

use redis_module::{raw, Context};

/// One command: what Redis needs to register it and to describe it.
pub struct CommandSpec {
    pub name: &'static str,
    pub entry: raw::RedisModuleCmdFunc,
    /// Command flags (`write deny-oom fast`, …).
    pub flags: &'static CStr,
    /// ACL categories, beyond the module's own `fencelock` category.
    pub categories: &'static str,
    /// A replicated form (`LOCK.APPLY`, `LOCK.DROP`, `LOCK.MARK`): kept out of the
    /// `fencelock` category, which is what application users are given.
    pub replication_form: bool,
    pub summary: &'static str,
    /// `COMMAND DOCS`: the release the command came in, and its cost.
    pub since: &'static CStr,
    pub complexity: &'static CStr,
    /// Redis convention: N exactly, -N at least N (counting the command name).
    pub arity: c_int,
    /// Where its keys are, and their key-spec flags.
    pub keys: Keys,
}

/// Where a command's keys are.
#[derive(Clone, Copy)]
pub enum Keys {
    /// One key, at position 1.
    One(KeyFlags),
    /// `numkeys` at position 1, then that many keys.
    Numkeys(KeyFlags),
    /// The command declares its keys itself when Redis asks (flag `getkeys-api`): one
    /// that runs another command, whose keys only that command's own rules can find.
    Declared,
}

impl Keys {
    fn flags(self) -> Option<KeyFlags> {
        match self {
            Keys::One(flags) | Keys::Numkeys(flags) => Some(flags),
            Keys::Declared => None,
        }
    }
}

/// Key-spec flags, combined with `with`.
#[derive(Clone, Copy)]
pub struct KeyFlags(u32);

impl KeyFlags {
    pub const fn with(self, other: KeyFlags) -> KeyFlags {
        KeyFlags(self.0 | other.0)
    }
}

pub const RO: KeyFlags = KeyFlags(raw::REDISMODULE_CMD_KEY_RO);
pub const RW: KeyFlags = KeyFlags(raw::REDISMODULE_CMD_KEY_RW);
pub const OW: KeyFlags = KeyFlags(raw::REDISMODULE_CMD_KEY_OW);
pub const ACCESS: KeyFlags = KeyFlags(raw::REDISMODULE_CMD_KEY_ACCESS);
pub const UPDATE: KeyFlags = KeyFlags(raw::REDISMODULE_CMD_KEY_UPDATE);
pub const DELETE: KeyFlags = KeyFlags(raw::REDISMODULE_CMD_KEY_DELETE);

/// Creates every command of `commands`; false on failure.
pub fn register(ctx: &Context, commands: &[CommandSpec]) -> bool {
    let create = api!(RedisModule_CreateCommand);
    for command in commands {
        let Ok(name) = CString::new(command.name) else {
            return false;
        };
        // The legacy key range: the one key, or none for a command whose keys only
        // its key spec (numkeys) or the command itself can find.
        let key_range = c_int::from(matches!(command.keys, Keys::One(_)));
        // SAFETY: static entry point and C strings; called during load.
        let created = unsafe {
            create(
                ctx.ctx,
                name.as_ptr(),
                command.entry,
                command.flags.as_ptr(),
                key_range,
                key_range,
                key_range,
            )
        };
        if created != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!("fencelock: could not create {}", command.name));
            return false;
        }
        describe(ctx, command);
    }
    set_acl_categories(ctx, commands);
    true
}

fn command_handle(ctx: &Context, name: &str) -> Option<*mut raw::RedisModuleCommand> {
    let get_command = api!(RedisModule_GetCommand);
    let name = CString::new(name).ok()?;
    // SAFETY: the command was registered by the module table before init runs.
    let handle = unsafe { get_command(ctx.ctx, name.as_ptr()) };
    (!handle.is_null()).then_some(handle)
}

/// Registers arity, summary and the key spec (one key at index 1, or numkeys keys after
/// index 1). Redis copies
/// everything it is given, so the structures can live on the stack.
fn describe(ctx: &Context, command: &CommandSpec) {
    let set_info = api!(RedisModule_SetCommandInfo);
    let (Some(handle), Ok(summary)) = (
        command_handle(ctx, command.name),
        CString::new(command.summary),
    ) else {
        return;
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let find_keys = match command.keys {
        // numkeys at the search's start (index 1), the keys right after it, one by one.
        Keys::Numkeys(_) => (
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                    keynumidx: 0,
                    firstkey: 1,
                    keystep: 1,
                },
            },
        ),
        Keys::One(_) | Keys::Declared => (
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        ),
    };
    // SAFETY: all-zero is the documented terminator of a key-spec array.
    let terminator: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let mut key_specs = [
        raw::RedisModuleCommandKeySpec {
            notes: std::ptr::null(),
            flags: u64::from(command.keys.flags().map_or(0, |flags| flags.0)),
            begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
            },
            find_keys_type: find_keys.0,
            fk: find_keys.1,
        },
        terminator,
    ];
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: summary.as_ptr(),
        complexity: command.complexity.as_ptr(),
        since: command.since.as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: command.arity,
        key_specs: if command.keys.flags().is_some() {
            key_specs.as_mut_ptr()
        } else {
            std::ptr::null_mut()
        },
        args: std::ptr::null_mut(),
    };
    // SAFETY: `info` and everything it points to outlive the call; Redis copies them.
    if unsafe { set_info(handle, &info) } != raw::REDISMODULE_OK as c_int {
        ctx.log_warning(&format!("fencelock: could not describe {}", command.name));
    }
}

/// Redis 7.2 lets modules put commands in categories, 7.4 lets them add their own
/// (`+@fencelock`). On older servers module commands belong to no category.
fn set_acl_categories(ctx: &Context, commands: &[CommandSpec]) {
    let Some(set_categories) = optional_api!(RedisModule_SetCommandACLCategories) else {
        return;
    };
    let own_category = optional_api!(RedisModule_AddACLCategory).is_some_and(|add| {
        // SAFETY: called during load with a valid C string.
        unsafe { add(ctx.ctx, c"fencelock".as_ptr()) == raw::REDISMODULE_OK as c_int }
    });
    for command in commands {
        let categories = if own_category && !command.replication_form {
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
