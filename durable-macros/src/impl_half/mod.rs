//! The impl block, as far as both macros read it alike: its shape and the names of its items
//! ([`block`]), the helper attributes on its items ([`helpers`]), and the rules every marked
//! method follows ([`signature`]). Each macro's own rules for its methods stay in its
//! `validate` module.

pub(crate) mod block;
pub(crate) mod helpers;
pub(crate) mod signature;
