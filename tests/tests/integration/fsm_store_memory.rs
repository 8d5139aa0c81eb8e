//! The FSM store conformance suite on `MemoryFsmStore`.

use durable_runtime::fsm::MemoryFsmStore;

durable_runtime::fsm_conformance_tests!(|_case| async { Some(MemoryFsmStore::new()) });
