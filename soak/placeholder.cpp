// Placeholder so the soak library exists before its first component lands.
namespace calserve::soak_placeholder { int anchor = 0; }
