//! The subset of upstream `protos/perfetto/trace/perfetto_trace.proto` used here.

/// `TracePacket` (oneof `data` members as plain optional fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    /// When the packet's event happened, nanoseconds (the trace's clock: since session start).
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// The packet sequence (always 1 here): interned ids are per sequence.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// A slice begin or end, an instant or a counter value.
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    /// Names, source locations, frames and stacks first used by this packet.
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    /// [`SEQ_INCREMENTAL_STATE_CLEARED`] and/or [`SEQ_NEEDS_INCREMENTAL_STATE`].
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// Set on the first packet: no interned data before it counts.
    #[prost(bool, optional, tag = "41")]
    pub incremental_state_cleared: Option<bool>,
    /// Declares a track (process, thread, future lane, counter).
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
    /// A stack sample.
    #[prost(message, optional, tag = "66")]
    pub perf_sample: Option<PerfSample>,
    /// Set on the sequence's first packet: nothing was lost before it.
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
}

/// `TracePacket.SequenceFlags`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// The packet refers to interned data of earlier packets.
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// `TrackDescriptor`: a track the UI draws events on.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    /// The track's id, unique in the trace; events name it in `track_uuid`.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// The name the UI shows (`fn #n` for a future's lane, `off-CPU` ...).
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// Set on a process track.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// Set on a thread track.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    /// The track this one nests under in the UI.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// Set on a counter track.
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// `ProcessDescriptor`: the process a track stands for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    /// Process id.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// The program (`TraceMeta::program`).
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// `ThreadDescriptor`: the thread a track stands for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    /// Process id of the thread's process.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// OS thread id.
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
    /// The thread's name.
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `CounterDescriptor`: makes a track a counter track.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    /// The unit shown beside values: the counter's name (`instructions`,
    /// `allocs` ...).
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

/// `TrackEvent.Type`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
/// Ends the innermost open slice on the track.
pub const TYPE_SLICE_END: i32 = 2;
/// An instant event.
pub const TYPE_INSTANT: i32 = 3;
/// A value on a counter track.
pub const TYPE_COUNTER: i32 = 4;

/// `TrackEvent`: an event on a track.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    /// Arguments shown when the event is selected (recorded values, counters, depth).
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// [`TYPE_SLICE_BEGIN`], [`TYPE_SLICE_END`], [`TYPE_INSTANT`] or [`TYPE_COUNTER`].
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    /// The event's name, as an interned [`EventName`] id.
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    /// The track the event is on ([`TrackDescriptor::uuid`]).
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// Categories (`event` for instant markers, `future`, `poll`, `lost`,
    /// `off-cpu`).
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    /// The event's name, inline (not interned).
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// A [`TYPE_COUNTER`] event's value.
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    /// The source location, as an interned [`SourceLocation`] id.
    #[prost(uint64, optional, tag = "34")]
    pub source_location_iid: Option<u64>,
    /// Flows this event starts or continues (a poll on its thread: the arrow to its future's lane).
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    /// Flows this event ends (the poll's copy on the lane).
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

/// `DebugAnnotation`: one named argument of an event (one value field set).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    /// A boolean value.
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    /// An unsigned integer value.
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    /// A signed integer value.
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    /// A string value.
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    /// The argument's name.
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
}

/// `InternedData`: entries the packets after this one refer to by id.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    /// Event names, by id.
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<EventName>,
    /// Source locations, by id.
    #[prost(message, repeated, tag = "4")]
    pub source_locations: Vec<SourceLocation>,
    /// Function names of frames, by id.
    #[prost(message, repeated, tag = "5")]
    pub function_names: Vec<InternedString>,
    /// Stack frames, by id.
    #[prost(message, repeated, tag = "6")]
    pub frames: Vec<Frame>,
    /// Call stacks (lists of frame ids), by id.
    #[prost(message, repeated, tag = "7")]
    pub callstacks: Vec<Callstack>,
    /// Path components of mappings, by id.
    #[prost(message, repeated, tag = "17")]
    pub mapping_paths: Vec<InternedString>,
    /// Executable mappings, by id.
    #[prost(message, repeated, tag = "19")]
    pub mappings: Vec<Mapping>,
}

/// `EventName`: an interned event name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EventName {
    /// The id events use (`name_iid`), unique in the sequence.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// The name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

/// `SourceLocation`: an interned source location.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SourceLocation {
    /// The id events use (`source_location_iid`).
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Source file.
    #[prost(string, optional, tag = "2")]
    pub file_name: Option<String>,
    /// Function's full name.
    #[prost(string, optional, tag = "3")]
    pub function_name: Option<String>,
    /// Line in `file_name`, 1-based.
    #[prost(uint32, optional, tag = "4")]
    pub line_number: Option<u32>,
}

/// `InternedString`: an interned string (function names, path components).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedString {
    /// The id that refers to the string.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// The string's bytes (UTF-8).
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

/// `Frame`: an interned stack frame.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Frame {
    /// The id call stacks use.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// The function's name, an id in `InternedData::function_names`.
    #[prost(uint64, optional, tag = "2")]
    pub function_name_id: Option<u64>,
    /// The mapping the address is in, an id in `InternedData::mappings`.
    #[prost(uint64, optional, tag = "3")]
    pub mapping_id: Option<u64>,
    /// The address relative to the mapping's start.
    #[prost(uint64, optional, tag = "4")]
    pub rel_pc: Option<u64>,
}

/// `Callstack`: an interned stack of frames.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Callstack {
    /// The id samples use (`callstack_iid`).
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Frame ids, outermost (root) first.
    #[prost(uint64, repeated, packed = "false", tag = "2")]
    pub frame_ids: Vec<u64>,
}

/// `Mapping`: an interned executable mapping.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// The id frames use (`mapping_id`).
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Start address in the process.
    #[prost(uint64, optional, tag = "4")]
    pub start: Option<u64>,
    /// End address (exclusive).
    #[prost(uint64, optional, tag = "5")]
    pub end: Option<u64>,
    /// The file's path, as ids in `InternedData::mapping_paths`.
    #[prost(uint64, repeated, packed = "false", tag = "7")]
    pub path_string_ids: Vec<u64>,
}

/// `PerfSample`: one stack sample of a thread.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PerfSample {
    /// CPU the sample was taken on (fgtrace does not record it: always 0).
    #[prost(uint32, optional, tag = "1")]
    pub cpu: Option<u32>,
    /// Process id.
    #[prost(uint32, optional, tag = "2")]
    pub pid: Option<u32>,
    /// OS thread id.
    #[prost(uint32, optional, tag = "3")]
    pub tid: Option<u32>,
    /// The stack, an interned [`Callstack`] id.
    #[prost(uint64, optional, tag = "4")]
    pub callstack_iid: Option<u64>,
}
