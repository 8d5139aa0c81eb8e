//! Code generation for `#[durable_fsm]`: reads only the IR of [`super::model`].
//!
//! The struct half gets serde's derives, `Default` from the field defaults and `FsmState`;
//! the impl half gets one `Step<Self>` constant per step and the `Fsm` impl dispatching
//! stored step names to the methods. Conventions are the object macro's: absolute paths,
//! hidden items in `const _: () = { .. };`, checks spanned at the user's types.

use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{LitStr, Type};

use super::model::{ErrorFn, FsmStruct, StepFn, StepSet};
use crate::codegen::replace_self;
use crate::model::{Shape, StateField};

/// Hidden items in an anonymous constant.
fn hidden(tokens: TokenStream) -> TokenStream {
    quote! {
        const _: () = {
            #tokens
        };
    }
}

/// The struct half.
pub(crate) fn state(fsm: &FsmStruct) -> TokenStream {
    let FsmStruct {
        root,
        attrs,
        vis,
        ident,
        name,
        version,
        queue,
        priority,
        result,
        shape,
    } = fsm;
    let private = root.private();
    let serde_crate = root.serde_crate();
    let fsm_ty: Type = syn::parse_quote!(#ident);

    let (body, serde_attr, default_body, checks) = match shape {
        Shape::Named(fields) => {
            let definitions = fields.iter().map(|field| {
                let StateField {
                    attrs,
                    vis,
                    ident,
                    ty,
                    ..
                } = field;
                quote!(#(#attrs)* #vis #ident: #ty)
            });
            let initializers = fields.iter().map(|field| initializer(field, &private));
            let checks = fields.iter().map(|field| {
                let ty = replace_self(&field.ty, &fsm_ty);
                quote_spanned!(field.ty.span()=> #private::assert_stored::<#ty>();)
            });
            (
                quote!({ #(#definitions,)* }),
                quote!(#[serde(crate = #serde_crate, default)]),
                quote!(Self { #(#initializers,)* }),
                quote!(#(#checks)*),
            )
        }
        Shape::Unit => (
            quote!(;),
            quote!(#[serde(crate = #serde_crate)]),
            quote!(Self),
            TokenStream::new(),
        ),
    };
    let name = LitStr::new(name, ident.span());
    let queue = LitStr::new(queue, ident.span());
    let version = Literal::i32_unsuffixed(*version);
    let priority = Literal::i16_unsuffixed(*priority);
    // Spanned at the user's type, so that a result type that cannot be stored is reported
    // there (through `FsmResult`, the bound of `FsmState::Result`).
    let result_ty = match result {
        Some(ty) => {
            let replaced = replace_self(ty, &fsm_ty);
            quote_spanned!(ty.span()=> #replaced)
        }
        None => quote!(()),
    };
    let hidden = hidden(quote! {
        #[automatically_derived]
        impl ::core::default::Default for #ident {
            fn default() -> Self {
                #default_body
            }
        }

        #[automatically_derived]
        impl #private::fsm::FsmState for #ident {
            const NAME: &'static ::core::primitive::str = #name;
            const VERSION: ::core::primitive::i32 = #version;
            const QUEUE: &'static ::core::primitive::str = #queue;
            const PRIORITY: ::core::primitive::i16 = #priority;
            type Result = #result_ty;
        }

        #checks
    });
    quote! {
        #[derive(#private::serde::Serialize, #private::serde::Deserialize)]
        #serde_attr
        #(#attrs)*
        #vis struct #ident #body

        #hidden
    }
}

/// `field: <default>`: the user's expression, or the type's default through `FieldDefault`,
/// spanned at the type (as the object macro does).
fn initializer(field: &StateField, private: &TokenStream) -> TokenStream {
    let StateField {
        ident, ty, default, ..
    } = field;
    match default {
        Some(expr) => quote!(#ident: #expr),
        None => quote_spanned! {ty.span()=>
            #ident: <#ty as #private::FieldDefault>::field_default()
        },
    }
}

/// The impl half.
pub(crate) fn steps(set: &StepSet) -> TokenStream {
    let private = set.root.private();
    let item = &set.item;
    let self_ty = &set.self_ty;
    let constants = set.steps.iter().map(|step| constant(set, step, &private));
    let allows = quote!(#[allow(dead_code, unreachable_pub)]);
    let constants = quote! {
        #allows
        impl #self_ty {
            #(#constants)*
        }
    };
    let Some(initial) = &set.initial else {
        // Without an initial step there is no `Fsm` impl; the error says why. The state half
        // is still checked, so that a missing struct half is reported too.
        let check = quote_spanned! {self_ty.span()=>
            #private::fsm::assert_fsm_state::<#self_ty>();
        };
        let check = hidden(check);
        return quote!(#item #constants #check);
    };
    let initial = LitStr::new(&initial.unraw().to_string(), initial.span());
    let names = set
        .steps
        .iter()
        .map(|step| LitStr::new(&step.name, step.method.span()));
    let arms = set
        .steps
        .iter()
        .filter(|step| !step.stub)
        .map(|step| arm(set, step, &private));
    let on_error = set
        .on_error
        .as_ref()
        .map(|handler| on_error(set, handler, &private));
    let fsm_impl = hidden(quote! {
        #[automatically_derived]
        impl #private::fsm::Fsm for #self_ty {
            const INITIAL: #private::fsm::Step<Self> = #private::fsm::step::<Self>(#initial);
            const STEPS: &'static [&'static ::core::primitive::str] = &[#(#names),*];

            fn run_step<'__a>(
                &'__a mut self,
                __step: &::core::primitive::str,
                __ctx: &'__a #private::fsm::StepContext,
            ) -> ::core::option::Option<
                #private::fsm::BoxFuture<
                    '__a,
                    ::core::result::Result<#private::fsm::Outcome<Self>, #private::fsm::BoxError>,
                >,
            > {
                let _ = &__ctx;
                match __step {
                    #(#arms)*
                    _ => ::core::option::Option::None,
                }
            }

            #on_error
        }
    });
    quote!(#item #constants #fsm_impl)
}

/// `<Fsm>::<NAME>`: the step's constant.
fn constant(set: &StepSet, step: &StepFn, private: &TokenStream) -> TokenStream {
    let StepFn {
        method,
        name,
        constant,
        docs: user_docs,
        ..
    } = step;
    let fsm = set.object.unraw().to_string();
    let text = format!(
        " The step `{name}` (`{fsm}::{}`): move to it with `Outcome::next({fsm}::{constant})`, or name it as the step after an await or a barrier. Generated by `#[durable_fsm]`.",
        method.unraw()
    );
    let docs = if user_docs.is_empty() {
        quote!(#[doc = #text])
    } else {
        quote!(#(#user_docs)* #[doc = ""] #[doc = #text])
    };
    let name = LitStr::new(name, method.span());
    quote! {
        #docs
        pub const #constant: #private::fsm::Step<Self> = #private::fsm::step::<Self>(#name);
    }
}

/// One arm of `run_step`: calls the method and converts its result, spanned at its return
/// type so that a type that is not an outcome is reported there.
fn arm(set: &StepSet, step: &StepFn, private: &TokenStream) -> TokenStream {
    let self_ty = &set.self_ty;
    let StepFn {
        method,
        name,
        is_async,
        takes_ctx,
        output,
        ..
    } = step;
    let ctx = takes_ctx.then(|| quote!(__ctx));
    let awaited = is_async.then(|| quote!(.await));
    let call = quote!(<#self_ty>::#method(self, #ctx) #awaited);
    let convert = quote_spanned! {output.span()=>
        #private::fsm::step_result::<Self, #output>(#call)
    };
    quote! {
        #name => ::core::option::Option::Some(::std::boxed::Box::pin(async move {
            #convert
        })),
    }
}

/// `Fsm::on_error`, calling the user's handler.
fn on_error(set: &StepSet, handler: &ErrorFn, private: &TokenStream) -> TokenStream {
    let self_ty = &set.self_ty;
    let ErrorFn {
        method,
        is_async,
        takes_ctx,
        output,
    } = handler;
    let ctx = takes_ctx.then(|| quote!(, __ctx));
    let awaited = is_async.then(|| quote!(.await));
    let call = quote!(<#self_ty>::#method(self, __error #ctx) #awaited);
    let outcome = quote_spanned! {output.span()=>
        let __outcome: #private::fsm::Outcome<Self> = #call;
    };
    quote! {
        fn on_error<'__a>(
            &'__a mut self,
            __error: #private::fsm::StepError,
            __ctx: &'__a #private::fsm::StepContext,
        ) -> #private::fsm::BoxFuture<'__a, #private::fsm::Outcome<Self>> {
            let _ = &__ctx;
            ::std::boxed::Box::pin(async move {
                #outcome
                __outcome
            })
        }
    }
}
