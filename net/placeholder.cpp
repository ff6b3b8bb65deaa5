// Placeholder so the net library exists before its first component lands.
namespace calserve::net_placeholder { int anchor = 0; }
