//! Frame-pointer unwinders, one per architecture.
