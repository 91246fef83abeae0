//! `#[traced]` and `#[notrace]` for fgtrace.
use proc_macro::TokenStream;

#[proc_macro_attribute]
pub fn traced(_attr: TokenStream, item: TokenStream) -> TokenStream {
    item
}

#[proc_macro_attribute]
pub fn notrace(_attr: TokenStream, item: TokenStream) -> TokenStream {
    item
}
