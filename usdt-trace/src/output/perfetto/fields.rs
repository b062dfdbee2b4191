//! Field numbers from Perfetto's protos/perfetto/trace/trace_packet.proto and friends.

// Field numbers from protos/perfetto/trace/trace_packet.proto and friends.
pub(crate) const TRACE_PACKET: u32 = 1;

pub(crate) mod packet {
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const TRACE_PACKET_DEFAULTS: u32 = 59;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    /// TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
}

pub(crate) mod clock {
    pub const REALTIME: u64 = 1;
    pub const MONOTONIC: u64 = 3;
    pub const BOOTTIME: u64 = 6;
}

pub(crate) mod track {
    pub const UUID: u32 = 1;
    pub const NAME: u32 = 2;
    pub const PROCESS: u32 = 3;
    pub const THREAD: u32 = 4;
    pub const PARENT_UUID: u32 = 5;
}

pub(crate) mod event {
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const TRACK_UUID: u32 = 11;
    pub const CATEGORIES: u32 = 22;
    pub const NAME: u32 = 23;
    /// `repeated fixed64`: flows starting or passing here, and flows ending here.
    pub const FLOW_IDS: u32 = 47;
    pub const TERMINATING_FLOW_IDS: u32 = 48;
    pub const SLICE_BEGIN: u64 = 1;
    pub const SLICE_END: u64 = 2;
    pub const INSTANT: u64 = 3;
}

pub(crate) mod annot {
    pub const UINT: u32 = 3;
    pub const INT: u32 = 4;
    pub const STRING: u32 = 6;
    pub const NAME: u32 = 10;
}
