//! Integration, conformance and compile-fail tests of the durable workspace.
