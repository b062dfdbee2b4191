//! The names user space finds the kernel's maps by. The eBPF side declares each as a
//! `#[map] static` of the same name (a `#[map]` name must be a literal there); the test
//! `maps_user_space_names_exist_in_the_object` in the user crate holds the two together.

pub const AGG: &str = "AGG";
pub const AGG_COUNTS: &str = "AGG_COUNTS";
pub const BY_COUNTS: &str = "BY_COUNTS";
pub const BY_COUNTS_SPILL: &str = "BY_COUNTS_SPILL";
pub const BY_COUNTS_STR: &str = "BY_COUNTS_STR";
pub const BY_COUNTS_STR_SPILL: &str = "BY_COUNTS_STR_SPILL";
pub const BY_COUNT_OTHER: &str = "BY_COUNT_OTHER";
pub const BY_COUNT_UNKEYED: &str = "BY_COUNT_UNKEYED";
pub const BY_HISTS: &str = "BY_HISTS";
pub const BY_HISTS_SPILL: &str = "BY_HISTS_SPILL";
pub const BY_HISTS_STR: &str = "BY_HISTS_STR";
pub const BY_HISTS_STR_SPILL: &str = "BY_HISTS_STR_SPILL";
pub const BY_OTHER: &str = "BY_OTHER";
pub const BY_SITES: &str = "BY_SITES";
pub const BY_UNKEYED: &str = "BY_UNKEYED";
pub const CONFIG: &str = "CONFIG";
pub const COUNTERS: &str = "COUNTERS";
pub const EVENTS: &str = "EVENTS";
pub const EXECS: &str = "EXECS";
pub const EXEC_COMMS: &str = "EXEC_COMMS";
pub const EXEC_CONFIG: &str = "EXEC_CONFIG";
pub const EXEC_COUNTS: &str = "EXEC_COUNTS";
pub const EXEC_KNOWN: &str = "EXEC_KNOWN";
pub const FILTER: &str = "FILTER";
pub const FILTER_SITES: &str = "FILTER_SITES";
pub const HISTS: &str = "HISTS";
pub const ID_SLOTS: &str = "ID_SLOTS";
pub const ID_SPANS: &str = "ID_SPANS";
pub const ID_STRS: &str = "ID_STRS";
pub const SITES: &str = "SITES";
pub const SITE_COUNTS: &str = "SITE_COUNTS";
pub const SYSCALL_CLASS: &str = "SYSCALL_CLASS";
pub const THREADS: &str = "THREADS";
pub const WAIT_SUMS: &str = "WAIT_SUMS";

/// Every name above: what the object must define.
pub const ALL: &[&str] = &[
    AGG,
    AGG_COUNTS,
    BY_COUNTS,
    BY_COUNTS_SPILL,
    BY_COUNTS_STR,
    BY_COUNTS_STR_SPILL,
    BY_COUNT_OTHER,
    BY_COUNT_UNKEYED,
    BY_HISTS,
    BY_HISTS_SPILL,
    BY_HISTS_STR,
    BY_HISTS_STR_SPILL,
    BY_OTHER,
    BY_SITES,
    BY_UNKEYED,
    CONFIG,
    COUNTERS,
    EVENTS,
    EXECS,
    EXEC_COMMS,
    EXEC_CONFIG,
    EXEC_COUNTS,
    EXEC_KNOWN,
    FILTER,
    FILTER_SITES,
    HISTS,
    ID_SLOTS,
    ID_SPANS,
    ID_STRS,
    SITES,
    SITE_COUNTS,
    SYSCALL_CLASS,
    THREADS,
    WAIT_SUMS,
];
