//! The struct half of `#[durable_object]`: the shared state struct code of
//! [`crate::state_half`] with `DurableObject` (type name and options) as its trait impl.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use syn::LitStr;

use crate::model::{Object, Options};
use crate::state_half;

/// Everything the struct half generates but its handle type.
pub(super) fn expand(object: &Object) -> TokenStream {
    let Object {
        root,
        state,
        options,
    } = object;
    let private = root.private();
    let ident = &state.ident;
    let type_name = LitStr::new(&state.name, ident.span());
    let options = options_expr(options, &private);
    let fields = super::describe::fields(state, &private);
    let trait_impl = quote! {
        #[automatically_derived]
        impl #private::DurableObject for #ident {
            const TYPE_NAME: &'static ::core::primitive::str = #type_name;

            fn options() -> #private::ObjectOptions {
                #options
            }

            #fields
        }
    };
    state_half::codegen::expand(state, root, trait_impl)
}

/// The `ObjectOptions` value built with the runtime's const builder.
fn options_expr(options: &Options, private: &TokenStream) -> TokenStream {
    let Options {
        hibernate_after,
        shutdown_after,
        call_timeout,
        queue_capacity,
        kv_max_keys,
        kv_max_value_bytes,
        kv_max_bytes,
        kv_cache_bytes,
    } = options;
    let duration = |name: &str, nanos: &Option<u64>| {
        nanos.map(|nanos| {
            let method = quote::format_ident!("with_{}", name);
            let nanos = Literal::u64_unsuffixed(nanos);
            quote!(.#method(#private::nanos(#nanos)))
        })
    };
    let hibernate_after = duration("hibernate_after", hibernate_after);
    let shutdown_after = duration("shutdown_after", shutdown_after);
    let call_timeout = duration("call_timeout", call_timeout);
    let queue_capacity = queue_capacity.map(|capacity| {
        let capacity = Literal::usize_unsuffixed(capacity);
        quote!(.with_queue_capacity(#capacity))
    });
    let limit = |name: &str, value: &Option<u64>| {
        value.map(|value| {
            let method = quote::format_ident!("with_{}", name);
            let value = Literal::u64_unsuffixed(value);
            quote!(.#method(#value))
        })
    };
    let kv = [
        limit("kv_max_keys", kv_max_keys),
        limit("kv_max_value_bytes", kv_max_value_bytes),
        limit("kv_max_bytes", kv_max_bytes),
        limit("kv_cache_bytes", kv_cache_bytes),
    ];
    quote! {
        #private::options() #hibernate_after #shutdown_after #call_timeout #queue_capacity #(#kv)*
    }
}
