//! The root path generated code reaches the runtime through (`::durable_runtime`, or the
//! `crate = ".."` override) and helpers to name items of its `__private` module.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};

/// The path of the `durable_runtime` crate as generated code must spell it.
#[derive(Clone, Debug)]
pub(crate) struct Root {
    path: syn::Path,
}

impl Default for Root {
    fn default() -> Self {
        Self {
            path: syn::parse_quote!(::durable_runtime),
        }
    }
}

impl Root {
    /// The root given by `crate = ".."`, or the default `::durable_runtime`.
    pub(crate) fn new(path: Option<syn::Path>) -> Self {
        path.map(|path| Self { path }).unwrap_or_default()
    }

    /// `<root>::__private`, the only module generated code uses.
    pub(crate) fn private(&self) -> TokenStream {
        let path = &self.path;
        quote!(#path::__private)
    }

    /// `<root>::__private` with every token at `span`, for code spanned at a user's item.
    pub(crate) fn private_at(&self, span: Span) -> TokenStream {
        respan(self.private(), span)
    }

    /// `"<root>::__private::serde"` as a string, for `#[serde(crate = "..")]`.
    pub(crate) fn serde_crate(&self) -> String {
        let mut out = String::new();
        if self.path.leading_colon.is_some() {
            out.push_str("::");
        }
        let segments: Vec<String> = self
            .path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        out.push_str(&segments.join("::"));
        out.push_str("::__private::serde");
        out
    }
}

/// `tokens` with every token (and group delimiter) at `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut respanned = Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                token = TokenTree::Group(respanned);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

impl ToTokens for Root {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        self.path.to_tokens(tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_crate_follows_the_root() {
        assert_eq!(
            Root::default().serde_crate(),
            "::durable_runtime::__private::serde"
        );
        let renamed = Root::new(Some(syn::parse_quote!(renamed)));
        assert_eq!(renamed.serde_crate(), "renamed::__private::serde");
    }
}
