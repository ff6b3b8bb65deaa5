// Placeholder so the device library exists before its first component lands.
namespace calserve::device_placeholder { int anchor = 0; }
