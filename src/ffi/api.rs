//! The Redis API functions the module needs, checked once at load: a server missing any
//! of them refuses the module with a log line naming it, instead of the module quietly
//! doing nothing (no reply, no replication) on some later call.

use redis_module::Context;

/// Every function the module calls through `api!`. (`optional_api!` ones — ACL
/// categories, defragmentation — are not here: older servers lack them by design.)
macro_rules! required {
    ($($name:ident),* $(,)?) => {
        // SAFETY: each static is written once while the module loads, read here after.
        [$((stringify!($name), unsafe { redis_module::raw::$name }.is_some())),*]
    };
}

/// The first required function this server lacks, if any.
fn first_missing() -> Option<&'static str> {
    let present = required![
        RedisModule_BlockClient,
        RedisModule_Call,
        RedisModule_CallReplyType,
        RedisModule_FreeCallReply,
        RedisModule_GetCommandKeysWithFlags,
        RedisModule_GetServerVersion,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPosWithFlags,
        RedisModule_ReplyWithCallReply,
        RedisModule_CloseKey,
        RedisModule_CommandFilterArgGet,
        RedisModule_CommandFilterArgReplace,
        RedisModule_CreateCommand,
        RedisModule_CreateString,
        RedisModule_CreateTimer,
        RedisModule_DeleteKey,
        RedisModule_DigestAddLongLong,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestEndSequence,
        RedisModule_EmitAOF,
        RedisModule_Free,
        RedisModule_FreeServerInfo,
        RedisModule_GetBlockedClientHandle,
        RedisModule_GetBlockedClientPrivateData,
        RedisModule_GetClientId,
        RedisModule_GetCommand,
        RedisModule_GetContextFlags,
        RedisModule_GetCurrentCommandName,
        RedisModule_GetDbIdFromOptCtx,
        RedisModule_GetAbsExpire,
        RedisModule_GetExpire,
        RedisModule_GetKeyNameFromOptCtx,
        RedisModule_GetSelectedDb,
        RedisModule_GetServerInfo,
        RedisModule_InfoAddFieldCString,
        RedisModule_InfoAddFieldLongLong,
        RedisModule_InfoAddSection,
        RedisModule_GetTimerInfo,
        RedisModule_IsIOError,
        RedisModule_KeyType,
        RedisModule_LoadConfigs,
        RedisModule_LoadStringBuffer,
        RedisModule_LoadUnsigned,
        RedisModule_Milliseconds,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeReplaceValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_RegisterCommandFilter,
        RedisModule_RegisterInfoFunc,
        RedisModule_Replicate,
        RedisModule_ReplicateVerbatim,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_SaveStringBuffer,
        RedisModule_SaveUnsigned,
        RedisModule_SelectDb,
        RedisModule_ServerInfoGetFieldC,
        RedisModule_SetAbsExpire,
        RedisModule_SetCommandInfo,
        RedisModule_SetDisconnectCallback,
        RedisModule_SetModuleOptions,
        RedisModule_SignalModifiedKey,
        RedisModule_StopTimer,
        RedisModule_StringPtrLen,
        RedisModule_SubscribeToKeyspaceEvents,
        RedisModule_SubscribeToServerEvent,
        RedisModule_UnblockClient,
        RedisModule_AvoidReplicaTraffic,
        RedisModule_GetCurrentUserName,
        RedisModule_GetModuleUserFromUserName,
        RedisModule_ACLCheckCommandPermissions,
        RedisModule_FreeModuleUser,
        RedisModule_FreeString,
    ];
    present
        .into_iter()
        .find(|(_, present)| !present)
        .map(|(name, _)| name)
}

/// Whether the server offers every required function; logs the first missing one.
pub fn check(ctx: &Context) -> bool {
    match first_missing() {
        None => true,
        Some(name) => {
            ctx.log_warning(&format!(
                "fencelock: this server lacks the module API function {name}; module not loaded"
            ));
            false
        }
    }
}

/// Reached only if a function passed `check` and then vanished: a bug, which the
/// entry point's guard reports.
#[cold]
pub fn absent(name: &str) -> ! {
    panic!("Redis module API function {name} is missing")
}
